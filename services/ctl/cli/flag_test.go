package cli

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/kit/go/waitroomkit"
)

// The operator flips the kits' off switch with nothing of the room running:
// Kafka and Redis point at closed ports, the api too. The flag is signed from
// the one in force (its other items kept), written where the kits read it,
// and a kit takes it at its next read: paused, then through.
func TestFlagSignFlipsTheKitsSwitchWithTheStoresDown(t *testing.T) {
	dir := t.TempDir()
	seed := make([]byte, ed25519.SeedSize)
	_, err := rand.Read(seed)
	require.NoError(t, err)
	keyFile := filepath.Join(dir, "flag.key")
	require.NoError(t, os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(seed)+"\n"), 0o600))
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	flagFile := filepath.Join(dir, "flag.jws")
	down := []string{"WR_KAFKA_BROKERS=127.0.0.1:27001", "WR_REDIS_ADDR=127.0.0.1:27002",
		"WR_API_URL=http://127.0.0.1:27003", "WR_ADMIN_URL=http://127.0.0.1:27004"}

	r := runBin(t, down, "flag", "public-key", "--key-file", keyFile)
	require.Equal(t, ExitOK, r.code, r)
	assert.Equal(t, base64.StdEncoding.EncodeToString(pub)+"\n", r.stdout)

	r = runBin(t, down, "flag", "sign", "--key-file", keyFile, "--default", "closed", "--item", "merch=open", "--item", "concert=paused", "--out", flagFile)
	require.Equal(t, ExitOK, r.code, r)
	assert.Contains(t, r.stdout, "item concert:  fail (the kit's), paused")
	first, err := os.ReadFile(flagFile)
	require.NoError(t, err)
	f, err := waitroomkit.VerifyFlag(string(first), pub)
	require.NoError(t, err)
	assert.Equal(t, waitroomkit.ItemFlag{FailMode: waitroomkit.FailClosed}, f.Default)
	assert.Equal(t, map[string]waitroomkit.ItemFlag{"merch": {FailMode: waitroomkit.FailOpen}, "concert": {Off: waitroomkit.OffPaused}}, f.Items)

	// A kit with the room down reads the file: the concert is paused.
	kit, err := waitroomkit.New("http://127.0.0.1:27003", waitroomkit.WithFlag(flagFile, pub, time.Hour))
	require.NoError(t, err)
	t.Cleanup(func() { _ = kit.Close() })
	shop := kit.Protect(waitroomkit.ItemFromPath("item"))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("shop"))
	}))
	mux := http.NewServeMux()
	mux.Handle("GET /shop/{item}", shop)
	get := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/shop/concert", nil))
		return w
	}
	require.NoError(t, kit.RefreshFlag(context.Background()))
	w := get()
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Contains(t, w.Body.String(), "The sale is paused")

	// Flip the concert to everyone-through, keeping merch: from the flag in
	// force, issued after it.
	r = runBin(t, down, "flag", "sign", "--key-file", keyFile, "--from", flagFile, "--item", "concert=through", "--out", flagFile)
	require.Equal(t, ExitOK, r.code, r)
	second, err := os.ReadFile(flagFile)
	require.NoError(t, err)
	g, err := waitroomkit.VerifyFlag(string(second), pub)
	require.NoError(t, err)
	assert.Equal(t, waitroomkit.ItemFlag{FailMode: waitroomkit.FailOpen}, g.Items["merch"], "merch kept")
	assert.True(t, g.IssuedAt.After(f.IssuedAt), "issued after the flag it replaces: %s, %s", g.IssuedAt, f.IssuedAt)
	require.NoError(t, kit.RefreshFlag(context.Background()))
	w = get()
	assert.Equal(t, http.StatusOK, w.Code, "through: %s", w.Body)
	assert.Equal(t, "shop", w.Body.String())

	// ID= removes the item's entry; show verifies with the public key.
	r = runBin(t, down, "flag", "sign", "--key-file", keyFile, "--from", flagFile, "--item", "concert=", "--out", flagFile)
	require.Equal(t, ExitOK, r.code, r)
	r = runBin(t, down, "-o", "json", "flag", "show", flagFile, "--public-key", base64.StdEncoding.EncodeToString(pub))
	require.Equal(t, ExitOK, r.code, r)
	assert.JSONEq(t, `{"default":{"failMode":"closed"},"items":{"merch":{"failMode":"open"}}}`, withoutIssued(t, r.stdout))

	// Refusals are usage errors, and leave the flag as it was.
	other := filepath.Join(dir, "other.key")
	require.NoError(t, os.WriteFile(other, []byte(base64.StdEncoding.EncodeToString(make([]byte, 32))), 0o600))
	before, err := os.ReadFile(flagFile)
	require.NoError(t, err)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"flag", "sign", "--key-file", other, "--from", flagFile, "--item", "x=paused", "--out", flagFile}, "--from: waitroomkit: flag: verify"},
		{[]string{"flag", "sign", "--key-file", keyFile, "--item", "x=stopped", "--out", flagFile}, `--item x: "stopped" is not open, closed, through, paused or on`},
		{[]string{"flag", "sign", "--item", "x=paused"}, "no flag key: give --key-file or set WR_FLAG_KEY"},
	} {
		r = runBin(t, down, c.args...)
		assert.Equal(t, ExitUsage, r.code, r)
		assert.Contains(t, r.stderr, c.want)
	}
	after, err := os.ReadFile(flagFile)
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after))

	// WR_FLAG_KEY works as --key-file does.
	r = runBin(t, append(down, "WR_FLAG_KEY="+base64.StdEncoding.EncodeToString(seed)), "flag", "sign", "--item", "x=paused")
	require.Equal(t, ExitOK, r.code, r)
	_, err = waitroomkit.VerifyFlag(r.stdout, pub)
	assert.NoError(t, err)
}

// withoutIssued drops issuedAt (a time) from a flag printed as JSON.
func withoutIssued(t *testing.T, s string) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m))
	require.NotEmpty(t, m["issuedAt"])
	delete(m, "issuedAt")
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b)
}
