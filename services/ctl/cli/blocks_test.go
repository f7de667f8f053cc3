package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// blocks add, rm and ls call the admin API's block routes with the token
// and print what it answers; its refusals are failures naming the problem.
func TestBlocksThroughTheAdminAPI(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.RequestURI()+" "+string(b))
		mu.Unlock()
		switch {
		case r.Header.Get("Authorization") != "Bearer s3cret":
			w.WriteHeader(http.StatusUnauthorized)
		case r.Method == http.MethodPost && bytes.Contains(b, []byte(`"bob"`)):
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"code":"INVALID_BLOCK","message":"block subject \"bob\" is not user:<userId> or ip:<cidr>"}}`)
		case r.Method == http.MethodPost:
			_, _ = io.WriteString(w, `{"v":1,"subject":"ip:203.0.113.0/24","reason":"farm","until":1893456000000,"at":1700000000000,"active":true}`)
		case r.Method == http.MethodDelete:
			_, _ = io.WriteString(w, `{"lifted":"ip:203.0.113.0/24"}`)
		default:
			_, _ = io.WriteString(w, `{"blocks":[{"v":1,"subject":"user:mallory","reason":"bot","at":1700000000000,"active":true}]}`)
		}
	}))
	defer srv.Close()
	ctl := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		env := DefaultEnv()
		env.AdminURL, env.AdminToken = srv.URL, "s3cret"
		code := Main(context.Background(), env, nil, args, &out, &errOut)
		return code, out.String(), errOut.String()
	}
	code, out, errOut := ctl("blocks", "add", "ip:203.0.113.9/24", "--reason", "farm", "--for", "90m")
	require.Equal(t, ExitOK, code, errOut)
	assert.Regexp(t, `(?m)^ip:203\.0\.113\.0/24\s+yes\s+2030-01-01T00:00:00Z\s+2023-11-14T22:13:20Z\s+farm$`, out)
	code, out, errOut = ctl("blocks", "ls")
	require.Equal(t, ExitOK, code, errOut)
	assert.Regexp(t, `(?m)^user:mallory\s+yes\s+lifted by hand\s+`, out)
	code, out, errOut = ctl("blocks", "rm", "ip:203.0.113.0/24")
	require.Equal(t, ExitOK, code, errOut)
	assert.Equal(t, "lifted ip:203.0.113.0/24\n", out)
	code, _, errOut = ctl("blocks", "add", "bob")
	assert.Equal(t, ExitFailure, code)
	assert.Contains(t, errOut, "400 INVALID_BLOCK")
	code, _, _ = ctl("blocks", "add")
	assert.Equal(t, ExitUsage, code)
	code, _, _ = ctl("blocks", "add", "user:a", "--for", "-1s")
	assert.Equal(t, ExitUsage, code)

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{
		`POST /internal/admin/v1/blocks {"forSeconds":5400,"reason":"farm","subject":"ip:203.0.113.9/24"}`,
		`GET /internal/admin/v1/blocks `,
		`DELETE /internal/admin/v1/blocks?subject=ip%3A203.0.113.0%2F24 `,
		`POST /internal/admin/v1/blocks {"reason":"","subject":"bob"}`,
	}, calls)
}
