package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/security/bypass"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/services/api/pow"
)

const bypassSeed = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

type powRequired struct {
	Error struct{ Code, Message string }
	Pow   httpapi.ChallengeResponse
}

// A proof-of-work item: no proof is 403 POW_REQUIRED with a challenge; the
// solved challenge registers once; again it is 409 POW_REUSED; a challenge of
// another item, a forged or an unsolved one is 403 POW_INVALID naming why.
func TestProofOfWork(t *testing.T) {
	it := item("hot")
	it.PowDifficulty = 10
	s := newAPI(t, it, item("cold"))

	a := s.post("/api/v1/items/hot/registrations", map[string]string{"userId": "u1"})
	require.Equal(t, http.StatusForbidden, a.Code, "%s", a.Body)
	var req powRequired
	a.decode(t, &req)
	require.Equal(t, "POW_REQUIRED", req.Error.Code)
	require.Equal(t, 10, req.Pow.Difficulty)
	require.True(t, strings.HasPrefix(req.Pow.Challenge, pow.Prefix), req.Pow.Challenge)

	x, ok := pow.Solve(req.Pow.Challenge, 10, 1<<24)
	require.True(t, ok)
	body := map[string]any{"userId": "u1", "pow": map[string]string{"challenge": req.Pow.Challenge, "solution": x}}
	a = s.post("/api/v1/items/hot/registrations", body)
	require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
	body["userId"] = "u2"
	a = s.post("/api/v1/items/hot/registrations", body)
	require.Equal(t, http.StatusConflict, a.Code, "%s", a.Body)
	assert.Equal(t, "POW_REUSED", a.errCode(t))

	// The challenge route hands out fresh ones; a cold item asks nothing.
	var ch httpapi.ChallengeResponse
	a = s.do(http.MethodGet, "/api/v1/items/hot/challenge", nil)
	require.Equal(t, http.StatusOK, a.Code)
	a.decode(t, &ch)
	require.Equal(t, 10, ch.Difficulty)
	require.NotEqual(t, req.Pow.Challenge, ch.Challenge)
	var cold httpapi.ChallengeResponse
	s.do(http.MethodGet, "/api/v1/items/cold/challenge", nil).decode(t, &cold)
	assert.Equal(t, httpapi.ChallengeResponse{}, cold)
	assert.Equal(t, http.StatusNotFound, s.do(http.MethodGet, "/api/v1/items/nope/challenge", nil).Code)

	forger, err := pow.New([]byte("not-the-api-key-not-the-api-key-!"), time.Minute)
	require.NoError(t, err)
	forged := forger.Issue("hot", 10).Raw
	fx, _ := pow.Solve(forged, 10, 1<<24)
	unsolved := "0"
	for i := 0; pow.LeadingZeros(pow.Hash(ch.Challenge, unsolved)) >= 10; i++ {
		unsolved = strings.Repeat("7", i+1)
	}
	for _, tc := range []struct{ name, ch, x, reason string }{
		{"forged", forged, fx, "signature"},
		{"unsolved", ch.Challenge, unsolved, "work"},
		{"garbage", "wrpow1.x", "1", "signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := s.post("/api/v1/items/hot/registrations", map[string]any{"userId": "u3", "pow": map[string]string{"challenge": tc.ch, "solution": tc.x}})
			require.Equal(t, http.StatusForbidden, a.Code, "%s", a.Body)
			var e powRequired
			a.decode(t, &e)
			assert.Equal(t, "POW_INVALID", e.Error.Code)
			assert.Contains(t, e.Error.Message, tc.reason)
		})
	}
	// A cold item ignores a proof nobody asked for.
	a = s.post("/api/v1/items/cold/registrations", map[string]any{"userId": "u9", "pow": map[string]string{"challenge": "x", "solution": "y"}})
	assert.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
}

// hot's challenge is refused on another item that asks a proof-of-work.
func TestProofOfWorkOtherItem(t *testing.T) {
	a, b := item("a"), item("b")
	a.PowDifficulty, b.PowDifficulty = 4, 4
	s := newAPI(t, a, b)
	var ch httpapi.ChallengeResponse
	s.do(http.MethodGet, "/api/v1/items/a/challenge", nil).decode(t, &ch)
	x, _ := pow.Solve(ch.Challenge, 4, 1<<20)
	r := s.post("/api/v1/items/b/registrations", map[string]any{"userId": "u", "pow": map[string]string{"challenge": ch.Challenge, "solution": x}})
	require.Equal(t, http.StatusForbidden, r.Code, "%s", r.Body)
	assert.Equal(t, "POW_INVALID", r.errCode(t))
	assert.Contains(t, string(r.Body), "another item")
}

// A bypass code registers (and skips the proof-of-work) while it has uses
// left; the used-up code is 403 BYPASS_EXHAUSTED; another item's, a forged or
// an expired code is 403 BYPASS_INVALID; without a public key, BYPASS_DISABLED.
func TestBypassCodes(t *testing.T) {
	pub, err := bypass.PublicOf(bypassSeed)
	require.NoError(t, err)
	it := item("vip")
	it.PowDifficulty = 20
	s := newAPIWith(t, func(c *httpapi.Config) { c.BypassPublicKey = pub }, it)
	priv, _ := bypass.ParsePrivate(bypassSeed)
	code, raw, err := bypass.Issue(priv, "vip", 1, time.Hour, time.Now())
	require.NoError(t, err)

	a := s.post("/api/v1/items/vip/registrations", map[string]string{"userId": "staff-1", "bypass": raw})
	require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
	var r httpapi.RegisterResponse
	a.decode(t, &r)
	q, err := s.signer.ParseQueue(r.Token)
	require.NoError(t, err)
	// The consumer counts the use (the record carries the code).
	res, err := s.line.Apply(context.Background(), []queue.Op{{Kind: queue.OpRegister, ItemID: "vip", TokenID: q.TokenID, UserID: q.PlaceKey(),
		Partition: q.Partition, Offset: q.Offset, Bypass: &queue.BypassOp{Code: code.ID, Count: code.Count}}})
	require.NoError(t, err)
	require.Equal(t, queue.Added, res[0].Outcome)

	a = s.post("/api/v1/items/vip/registrations", map[string]string{"userId": "staff-2", "bypass": raw})
	require.Equal(t, http.StatusForbidden, a.Code, "%s", a.Body)
	assert.Equal(t, "BYPASS_EXHAUSTED", a.errCode(t))

	_, other, _ := bypass.Issue(priv, "elsewhere", 5, time.Hour, time.Now())
	_, old, _ := bypass.Issue(priv, "vip", 5, time.Second, time.Now().Add(-time.Minute))
	forgedPriv, _ := bypass.ParsePrivate("BBECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
	_, forged, _ := bypass.Issue(forgedPriv, "vip", 5, time.Hour, time.Now())
	for name, c := range map[string]string{"item": other, "expired": old, "signature": forged, "malformed": "letmein"} {
		a := s.post("/api/v1/items/vip/registrations", map[string]string{"userId": "x-" + name, "bypass": c})
		require.Equal(t, http.StatusForbidden, a.Code, "%s: %s", name, a.Body)
		assert.Equal(t, "BYPASS_INVALID", a.errCode(t), name)
		assert.Contains(t, string(a.Body), name)
	}
	// Without a code the item still asks its proof-of-work.
	a = s.post("/api/v1/items/vip/registrations", map[string]string{"userId": "fan"})
	assert.Equal(t, "POW_REQUIRED", a.errCode(t))

	off := newAPI(t, item("plain"))
	_, code2, _ := bypass.Issue(priv, "plain", 1, time.Hour, time.Now())
	b, _ := json.Marshal(map[string]string{"bypass": code2})
	a = off.do(http.MethodPost, "/api/v1/items/plain/registrations", b)
	require.Equal(t, http.StatusConflict, a.Code, "%s", a.Body)
	assert.Equal(t, "BYPASS_DISABLED", a.errCode(t))
}
