package stack_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/kit/go/waitroomkit"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/services/dev/stack"
	"github.com/waitroom/waitroom/services/scheduler/admin"
	"go.uber.org/zap/zaptest"
)

// admit registers user for item and waits for the admission token.
func (e *env) admit(item, user string) string {
	e.t.Helper()
	r, _ := e.register(item, user)
	st := e.waitStatus(item, r.Token, "ADMITTED")
	require.NotEmpty(e.t, st.AdmissionToken)
	return st.AdmissionToken
}

// protected is a site behind kit's middleware: GET /shop/{itemId} answers
// 200 with the admitted user, anything refused is redirected.
func protected(t *testing.T, kit *waitroomkit.Kit) func(path, bearer string) (int, string) {
	mux := http.NewServeMux()
	mux.Handle("GET /shop/{itemId}", kit.Protect(waitroomkit.ItemFromPath("itemId"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := waitroomkit.FromContext(r.Context())
		_, _ = w.Write([]byte(a.UserID))
	})))
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return func(path, bearer string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, site.URL+path, nil)
		require.NoError(t, err)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusSeeOther {
			return resp.StatusCode, resp.Header.Get("Location")
		}
		b := make([]byte, 256)
		n, _ := resp.Body.Read(b)
		return resp.StatusCode, string(b[:n])
	}
}

// waitroomkit against the real api (kfake, redis-server, every service):
// the tokens the api signs pass; expired, forged, another item's, queue and
// completed tokens do not.
func TestKitAgainstTheAPI(t *testing.T) {
	// "brief" sessions last 3 s: exp is in whole seconds, so a 1 s session
	// could end a few milliseconds after it began.
	e := newEnv(t, policy("tix", 50, 10, 60), policy("other", 50, 10, 60), policy("brief", 50, 10, 3))
	e.start()
	ctx := context.Background()
	kit, err := waitroomkit.New(e.stack.APIURL, waitroomkit.WithLeeway(0))
	require.NoError(t, err)
	require.NoError(t, kit.Refresh(ctx), "the api's JWKS")
	get := protected(t, kit)

	alice := e.admit("tix", "alice")
	a, err := kit.Verify(ctx, alice, "tix")
	require.NoError(t, err)
	assert.Equal(t, "alice", a.UserID)
	assert.WithinDuration(t, time.Now().Add(time.Minute), a.ExpiresAt, 5*time.Second)
	code, body := get("/shop/tix", alice)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "alice", body, "the handler sees the admission")

	// Nobody without a token, and another item's token, is sent to the page.
	code, loc := get("/shop/tix", "")
	assert.Equal(t, http.StatusSeeOther, code)
	assert.Equal(t, "/items/tix/wait", mustPath(t, loc))
	_, err = kit.Verify(ctx, alice, "other")
	assert.ErrorIs(t, err, waitroomkit.ErrOtherItem)
	code, loc = get("/shop/other", alice)
	assert.Equal(t, http.StatusSeeOther, code)
	assert.Equal(t, "/items/other/wait", mustPath(t, loc))

	// Forged: the same claims signed by another key under the api's kid, and
	// HS256 keyed with the api's public key (algorithm confusion).
	claims := parseUnverified(t, alice)
	_, stranger, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	forged := resign(t, jwt.SigningMethodEdDSA, stranger, claims)
	_, err = kit.Verify(ctx, forged, "tix")
	assert.ErrorIs(t, err, waitroomkit.ErrInvalid)
	code, _ = get("/shop/tix", forged)
	assert.Equal(t, http.StatusSeeOther, code)
	var set token.JWKS
	require.NoError(t, json.Unmarshal(e.do(http.MethodGet, "/.well-known/jwks.json", nil).Body, &set))
	pub, err := base64.RawURLEncoding.DecodeString(set.Keys[0].X)
	require.NoError(t, err)
	_, err = kit.Verify(ctx, resign(t, jwt.SigningMethodHS256, pub, claims), "tix")
	assert.ErrorIs(t, err, waitroomkit.ErrInvalid)
	// A queue token is no admission token.
	q, _ := e.register("tix", "carol")
	_, err = kit.Verify(ctx, q.Token, "tix")
	assert.ErrorIs(t, err, waitroomkit.ErrInvalid)

	// Expired: the session of "brief" lasts three seconds.
	bob := e.admit("brief", "bob")
	_, err = kit.Verify(ctx, bob, "brief")
	require.NoError(t, err, "valid before its session is up")
	time.Sleep(time.Until(parseUnverified(t, bob)["exp"].(time.Time)) + 1100*time.Millisecond)
	_, err = kit.Verify(ctx, bob, "brief")
	assert.ErrorIs(t, err, waitroomkit.ErrExpired)
	code, _ = get("/shop/brief", bob)
	assert.Equal(t, http.StatusSeeOther, code)

	// Completed: Complete ends it at the api; this kit refuses it from then
	// on even offline; another kit verifying online refuses it too, while one
	// verifying offline only cannot know (the documented trade-off).
	done, err := kit.Complete(ctx, alice, "tix")
	require.NoError(t, err)
	assert.Equal(t, "alice", done.UserID)
	_, err = kit.Verify(ctx, alice, "tix")
	assert.ErrorIs(t, err, waitroomkit.ErrEnded)
	code, _ = get("/shop/tix", alice)
	assert.Equal(t, http.StatusSeeOther, code)
	online, err := waitroomkit.New(e.stack.APIURL, waitroomkit.WithOnlineVerify())
	require.NoError(t, err)
	_, err = online.Verify(ctx, alice, "tix")
	assert.ErrorIs(t, err, waitroomkit.ErrEnded)
	offline, err := waitroomkit.New(e.stack.APIURL)
	require.NoError(t, err)
	_, err = offline.Verify(ctx, alice, "tix")
	assert.NoError(t, err, "offline verification alone does not see a completion made elsewhere")
	_, err = kit.Complete(ctx, alice, "tix")
	assert.ErrorIs(t, err, waitroomkit.ErrEnded, "completing twice")
	dave := e.admit("tix", "dave")
	_, err = online.Verify(ctx, dave, "tix")
	assert.NoError(t, err, "a live admission verifies online")
}

// A key rollover on the api (WR_ADMISSION_KEYS_EXTRA) while a protected site
// keeps running: tokens of the new key pass without restarting the site,
// tokens of the old key still pass (and complete at the api) until their
// session ends, and the JWKS publishes both.
func TestKitFollowsKeyRotation(t *testing.T) {
	e := newEnv(t, policy("rot", 50, 10, 60))
	seed := func(b byte) string {
		k := make([]byte, 32)
		for i := range k {
			k[i] = b
		}
		return base64.StdEncoding.EncodeToString(k)
	}
	// The site reaches the api through a balancer that the rollout moves to
	// the new api.
	var backend atomic.Pointer[url.URL]
	lb := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(backend.Load()) }})
	t.Cleanup(lb.Close)
	startAPI := func(o stack.Options) *stack.Stack {
		o.Brokers, o.Redis, o.TokenKey, o.AdminToken, o.Tick = e.brokers, &e.rcfg, testKey, adminToken, 100*time.Millisecond
		o.Log = zaptest.NewLogger(t).Named("stack")
		s, err := stack.Start(context.Background(), o)
		require.NoError(t, err)
		u, err := url.Parse(s.APIURL)
		require.NoError(t, err)
		backend.Store(u)
		e.stack = s
		return s
	}
	ctx := context.Background()
	kit, err := waitroomkit.New(lb.URL, waitroomkit.WithKeyRefresh(time.Second, 5*time.Minute))
	require.NoError(t, err)

	old := startAPI(stack.Options{AdmissionKey: seed(1), AdmissionKID: "a1"})
	t1 := e.admit("rot", "alice")
	_, err = kit.Verify(ctx, t1, "rot")
	require.NoError(t, err)
	require.NoError(t, old.Stop())

	s := startAPI(stack.Options{AdmissionKey: seed(2), AdmissionKID: "a2", AdmissionKeysExtra: "a1:" + seed(1)})
	t.Cleanup(func() { require.NoError(t, s.Stop()) })
	var set token.JWKS
	require.NoError(t, json.Unmarshal(e.do(http.MethodGet, "/.well-known/jwks.json", nil).Body, &set))
	require.Len(t, set.Keys, 2)
	assert.Equal(t, []string{"a2", "a1"}, []string{set.Keys[0].Kid, set.Keys[1].Kid})

	t2 := e.admit("rot", "bob")
	assert.Equal(t, "a2", headerKID(t, t2), "the new key signs")
	time.Sleep(time.Second) // the kit's rate limit on refreshes for an unknown kid
	a, err := kit.Verify(ctx, t2, "rot")
	require.NoError(t, err, "a token of the new key passes without restarting the site")
	assert.Equal(t, "bob", a.UserID)
	_, err = kit.Verify(ctx, t1, "rot")
	require.NoError(t, err, "a token of the old key still passes during the rollover")
	v := e.admissionCall("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: t1, ItemID: "rot"})
	assert.Equal(t, http.StatusOK, v.Code, "the new api verifies the old key's token: %s", v.Body)
	_, err = kit.Complete(ctx, t1, "rot")
	require.NoError(t, err, "and completes it")
	_, err = kit.Complete(ctx, t2, "rot")
	require.NoError(t, err)
}

// A user the operator blocks after their admission is refused by the api's
// verify and complete with 403 BLOCKED, which shares its status with
// TOKEN_ITEM_MISMATCH: the kit must tell the two apart, not say that the
// blocked user's token is for another item.
func TestKitTellsABlockedUserFromAnotherItem(t *testing.T) {
	e := newEnv(t, policy("gig", 50, 10, 60))
	e.start()
	ctx := context.Background()
	kit, err := waitroomkit.New(e.stack.APIURL, waitroomkit.WithOnlineVerify())
	require.NoError(t, err)
	mallory := e.admit("gig", "mallory")
	_, err = kit.Verify(ctx, mallory, "gig")
	require.NoError(t, err)

	req, err := http.NewRequest(http.MethodPost, e.stack.SchedulerURLs[0]+admin.Prefix+"/blocks",
		strings.NewReader(`{"subject":"user:mallory","reason":"ticket bot"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := e.http.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Eventually(t, func() bool {
		return e.admissionCall("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: mallory, ItemID: "gig"}).Code == http.StatusForbidden
	}, 15*time.Second, 50*time.Millisecond, "the api refuses the blocked user's admission")

	_, err = kit.Verify(ctx, mallory, "gig")
	assert.ErrorIs(t, err, waitroomkit.ErrBlocked)
	assert.NotErrorIs(t, err, waitroomkit.ErrOtherItem, "a blocked user's token is not another item's")
	var ae *waitroomkit.APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "BLOCKED", ae.Code)
	_, err = kit.Complete(ctx, mallory, "gig")
	assert.ErrorIs(t, err, waitroomkit.ErrBlocked)
	_, err = kit.Verify(ctx, mallory, "other")
	assert.ErrorIs(t, err, waitroomkit.ErrOtherItem, "another item's token is refused offline as before")
}

func mustPath(t *testing.T, loc string) string {
	t.Helper()
	u, err := url.Parse(loc)
	require.NoError(t, err)
	return u.Path
}

// parseUnverified reads a token's claims (exp as a time) without checking it.
func parseUnverified(t *testing.T, raw string) jwt.MapClaims {
	t.Helper()
	c := jwt.MapClaims{}
	_, _, err := jwt.NewParser().ParseUnverified(raw, c)
	require.NoError(t, err)
	exp, err := c.GetExpirationTime()
	require.NoError(t, err)
	c["exp"] = exp.Time
	return c
}

func resign(t *testing.T, m jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	cc := jwt.MapClaims{}
	for k, v := range c {
		cc[k] = v
	}
	cc["exp"] = c["exp"].(time.Time).Unix()
	tok := jwt.NewWithClaims(m, cc)
	tok.Header["kid"] = "a1"
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

func headerKID(t *testing.T, raw string) string {
	t.Helper()
	tok, _, err := jwt.NewParser().ParseUnverified(raw, jwt.MapClaims{})
	require.NoError(t, err)
	kid, _ := tok.Header["kid"].(string)
	return kid
}
