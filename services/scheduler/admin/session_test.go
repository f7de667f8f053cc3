package admin_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/scheduler/admin"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// clock is a settable clock the handlers read from their own goroutines.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) now() time.Time            { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration)       { c.ns.Add(int64(d)) }
func (c *clock) nowFunc() func() time.Time { return c.now }

// replica is one scheduler's admin server with only what the console's
// sessions need, over a Redis it may share with other replicas.
type replica struct {
	t   *testing.T
	url string
}

const sessionTTL = time.Hour

func newReplica(t *testing.T, rdb redis.UniversalClient, tok string, now func() time.Time) *replica {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	engine := httpserver.New(log, prometheus.NewRegistry(), &httpserver.Readiness{})
	admin.New(queue.New(rdb), staleItems{}, nil, tok, log).
		WithConsole(rdb, admin.ConsoleOptions{SecureCookie: true, SessionTTL: sessionTTL}).WithClock(now).Routes(engine)
	srv := httptest.NewServer(engine)
	t.Cleanup(srv.Close)
	return &replica{t: t, url: srv.URL}
}

var noRedirect = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// login signs in with tok and returns the session cookie (nil when refused).
func (r *replica) login(tok string) *http.Cookie {
	r.t.Helper()
	resp, err := noRedirect.PostForm(r.url+admin.ConsolePath+"/login", url.Values{"token": {tok}})
	require.NoError(r.t, err)
	resp.Body.Close()
	require.Equal(r.t, http.StatusSeeOther, resp.StatusCode)
	for _, ck := range resp.Cookies() {
		if ck.Name == "wr_admin_session" && ck.MaxAge > 0 {
			return ck
		}
	}
	return nil
}

// logout signs out with ck and returns the answer's status.
func (r *replica) logout(ck *http.Cookie) int {
	r.t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.url+admin.ConsolePath+"/logout", nil)
	require.NoError(r.t, err)
	req.AddCookie(ck)
	resp, err := noRedirect.Do(req)
	require.NoError(r.t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// api calls the admin API as the console does and returns the status.
func (r *replica) api(ck *http.Cookie) int {
	r.t.Helper()
	req, err := http.NewRequest(http.MethodGet, r.url+admin.Prefix+"/stats", nil)
	require.NoError(r.t, err)
	req.Header.Set("X-WR-Console", "1")
	req.AddCookie(ck)
	resp, err := noRedirect.Do(req)
	require.NoError(r.t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// signedIn reports whether the console page shows the console (not the form).
func (r *replica) signedIn(ck *http.Cookie) bool {
	r.t.Helper()
	req, err := http.NewRequest(http.MethodGet, r.url+admin.ConsolePath, nil)
	require.NoError(r.t, err)
	req.AddCookie(ck)
	resp, err := noRedirect.Do(req)
	require.NoError(r.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(r.t, err)
	require.Equal(r.t, http.StatusOK, resp.StatusCode)
	in, form := strings.Contains(string(b), `new EventSource("/admin/events")`), strings.Contains(string(b), `id="login"`)
	require.NotEqual(r.t, in, form, "either the console or the form: %s", b)
	return in
}

const longToken = "a-long-enough-admin-token-0123456789"

func TestConsoleSessionPastItsExpiryIsRefused(t *testing.T) {
	clk := newClock()
	r := newReplica(t, testenv.Redis(t), longToken, clk.nowFunc())
	ck := r.login(longToken)
	require.NotNil(t, ck)
	assert.Equal(t, int(sessionTTL.Seconds()), ck.MaxAge, "the cookie lives as long as the session")

	clk.add(sessionTTL - time.Second)
	assert.Equal(t, http.StatusOK, r.api(ck), "a second before its expiry")
	assert.True(t, r.signedIn(ck))
	clk.add(time.Second)
	assert.Equal(t, http.StatusUnauthorized, r.api(ck), "at its expiry, though the browser still sends the cookie")
	assert.False(t, r.signedIn(ck))
}

func TestConsoleLogoutEndsTheSessionOnEveryReplica(t *testing.T) {
	rdb := testenv.Redis(t)
	a, b := newReplica(t, rdb, longToken, time.Now), newReplica(t, rdb, longToken, time.Now)
	ck, other := a.login(longToken), a.login(longToken)
	require.NotNil(t, ck)
	require.NotNil(t, other)
	require.NotEqual(t, ck.Value, other.Value, "each sign-in is its own session")
	require.Equal(t, http.StatusOK, b.api(ck), "a session made on one replica holds on another")

	// An open event stream on a ends when the session ends on b.
	req, err := http.NewRequest(http.MethodGet, a.url+admin.ConsolePath+"/events", nil)
	require.NoError(t, err)
	req.AddCookie(ck)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := http.DefaultClient.Do(req.WithContext(ctx))
	require.NoError(t, err)
	defer stream.Body.Close()
	require.Equal(t, http.StatusOK, stream.StatusCode)
	events := bufio.NewScanner(stream.Body)
	require.True(t, events.Scan())
	require.Equal(t, "event: snapshot", events.Text(), "the stream runs while signed in")

	require.Equal(t, http.StatusSeeOther, b.logout(ck))
	assert.Equal(t, http.StatusUnauthorized, a.api(ck), "signed out on b: refused on a")
	assert.Equal(t, http.StatusUnauthorized, b.api(ck))
	assert.False(t, a.signedIn(ck))
	assert.Equal(t, http.StatusOK, a.api(other), "the other session goes on")

	var last string
	for events.Scan() {
		if last = events.Text(); strings.HasPrefix(last, "event: signedout") {
			break
		}
	}
	assert.Equal(t, "event: signedout", last, "the open stream told the page")

	// The revocation list holds this id (not the other) until the session's
	// expiry (plus a minute for clocks): it cannot grow past the live sessions.
	n, err := rdb.Exists(t.Context(), revokedKey(t, other)).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the other session is not listed")
	ttl, err := rdb.PTTL(t.Context(), revokedKey(t, ck)).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, sessionTTL-time.Minute)
	assert.LessOrEqual(t, ttl, sessionTTL+time.Minute)
}

func TestConsoleSessionEndsWhenTheAdminTokenChanges(t *testing.T) {
	rdb := testenv.Redis(t)
	before := newReplica(t, rdb, longToken, time.Now)
	ck := before.login(longToken)
	require.NotNil(t, ck)
	require.Equal(t, http.StatusOK, before.api(ck))

	// The replicas restart with a new token.
	after := newReplica(t, rdb, longToken+"-rotated", time.Now)
	assert.Equal(t, http.StatusUnauthorized, after.api(ck))
	assert.False(t, after.signedIn(ck))
	fresh := after.login(longToken + "-rotated")
	require.NotNil(t, fresh)
	assert.Equal(t, http.StatusOK, after.api(fresh), "the new token signs in")
	assert.Nil(t, after.login(longToken), "the old token does not")
}

func TestConsoleForgedCookieIsRefused(t *testing.T) {
	r := newReplica(t, testenv.Redis(t), longToken, time.Now)
	ck := r.login(longToken)
	require.NotNil(t, ck)
	require.Equal(t, http.StatusOK, r.api(ck))
	enc := base64.RawURLEncoding
	p, m, ok := strings.Cut(ck.Value, ".")
	require.True(t, ok, ck.Value)
	payload, err := enc.DecodeString(p)
	require.NoError(t, err)
	mac, err := enc.DecodeString(m)
	require.NoError(t, err)

	later := append([]byte(nil), payload...) // a year more, same signature
	binary.BigEndian.PutUint64(later[len(later)-8:], uint64(time.Now().AddDate(1, 0, 0).UnixMilli()))
	otherID := append([]byte(nil), payload...)
	otherID[0] ^= 1
	badMac := append([]byte(nil), mac...)
	badMac[len(badMac)-1] ^= 1
	for name, v := range map[string]string{
		"expiry extended":   enc.EncodeToString(later) + "." + m,
		"another id":        enc.EncodeToString(otherID) + "." + m,
		"signature flipped": p + "." + enc.EncodeToString(badMac),
		"signature cut":     p + "." + enc.EncodeToString(mac[:16]),
		"no signature":      p,
		"signature only":    "." + m,
		"padded":            ck.Value + "0",
		"standard base64":   base64.StdEncoding.EncodeToString(payload) + "." + base64.StdEncoding.EncodeToString(mac),
		"the admin token":   longToken,
		"two signatures":    ck.Value + "." + m,
		"a longer payload":  enc.EncodeToString(append(payload, 0)) + "." + m,
		"empty":             "",
	} {
		forged := &http.Cookie{Name: ck.Name, Value: v}
		assert.Equal(t, http.StatusUnauthorized, r.api(forged), name)
		assert.False(t, r.signedIn(forged), name)
	}
}

// revokedKey is where signing out lists ck's session: its id is the first
// 16 bytes of the cookie's payload.
func revokedKey(t *testing.T, ck *http.Cookie) string {
	t.Helper()
	p, _, _ := strings.Cut(ck.Value, ".")
	payload, err := base64.RawURLEncoding.DecodeString(p)
	require.NoError(t, err)
	require.Len(t, payload, 24)
	return "wr:console:revoked:" + hex.EncodeToString(payload[:16])
}

// loginFrom posts the sign-in form from the loopback address src (with
// extra headers) and returns the status, the Retry-After and the error body.
func loginFrom(t *testing.T, src, target, tok string, header http.Header) (int, string, httpserver.ErrorDetail) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer c.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, target+admin.ConsolePath+"/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var eb httpserver.ErrorBody
	if resp.StatusCode != http.StatusSeeOther {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&eb), "a JSON error body")
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), eb.Error
}

func TestConsoleLoginIsThrottledPerAddress(t *testing.T) {
	rdb := testenv.Redis(t)
	a, b := newReplica(t, rdb, longToken, time.Now), newReplica(t, rdb, longToken, time.Now)
	for i := range admin.DefaultLoginsPerMinute {
		code, _, _ := loginFrom(t, "127.0.0.1", a.url, "guess-"+strconv.Itoa(i), nil)
		require.Equal(t, http.StatusSeeOther, code, "attempt %d: a wrong token, answered", i+1)
	}
	code, retry, ed := loginFrom(t, "127.0.0.1", a.url, longToken, nil)
	assert.Equal(t, http.StatusTooManyRequests, code, "even the right token, once the budget is spent")
	assert.Equal(t, "RATE_LIMITED", ed.Code)
	secs, err := strconv.Atoi(retry)
	require.NoError(t, err, "Retry-After %q", retry)
	assert.True(t, secs >= 1 && secs <= 60, "Retry-After %d", secs)

	code, _, ed = loginFrom(t, "127.0.0.1", b.url, longToken, nil)
	assert.Equal(t, http.StatusTooManyRequests, code, "another replica shares the budget")
	code, _, _ = loginFrom(t, "127.0.0.1", b.url, longToken, http.Header{"X-Forwarded-For": {"203.0.113.9"}})
	assert.Equal(t, http.StatusTooManyRequests, code, "a forwarded-for header names no other client")
	code, _, _ = loginFrom(t, "127.0.0.2", a.url, longToken, nil)
	assert.Equal(t, http.StatusSeeOther, code, "another address has its own budget")
}

func TestConsoleLoginBodyIsBounded(t *testing.T) {
	r := newReplica(t, testenv.Redis(t), longToken, time.Now)
	post := func(body string) (int, httpserver.ErrorDetail) {
		resp, err := noRedirect.Post(r.url+admin.ConsolePath+"/login", "application/x-www-form-urlencoded", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var eb httpserver.ErrorBody
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&eb), "a JSON error body")
		return resp.StatusCode, eb.Error
	}
	code, ed := post("token=" + longToken + "&pad=" + strings.Repeat("x", 4<<10))
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)
	assert.Equal(t, "BODY_TOO_LARGE", ed.Code)
	code, ed = post("token=%zz")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "INVALID_BODY", ed.Code)
	assert.NotNil(t, r.login(longToken), "a form of normal size signs in")
}

func TestConsoleCookieSecureOff(t *testing.T) {
	rdb := testenv.Redis(t)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	engine := httpserver.New(log, prometheus.NewRegistry(), &httpserver.Readiness{})
	admin.New(queue.New(rdb), staleItems{}, nil, longToken, log).WithConsole(rdb, admin.ConsoleOptions{}).Routes(engine)
	srv := httptest.NewServer(engine)
	defer srv.Close()
	ck := (&replica{t: t, url: srv.URL}).login(longToken)
	require.NotNil(t, ck)
	assert.False(t, ck.Secure, "SecureCookie off: the cookie also goes over plain http")
	assert.True(t, ck.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, ck.SameSite)
}

// Fail-safe: while Redis cannot say whether a session was signed out, it is
// refused, and nobody signs in past the throttle it cannot ask.
func TestConsoleRefusesWhatRedisCannotCheck(t *testing.T) {
	srv := testenv.StartRedis(t)
	r := newReplica(t, srv.Client(), longToken, time.Now)
	ck := r.login(longToken)
	require.NotNil(t, ck)
	require.Equal(t, http.StatusOK, r.api(ck), "a session while Redis answers")

	srv.Stop()
	assert.Equal(t, http.StatusServiceUnavailable, r.api(ck), "the API: 503, not the session taken on trust")
	assert.False(t, r.signedIn(ck), "the page: the sign-in form")
	code, _, ed := loginFrom(t, "127.0.0.1", r.url, longToken, nil)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "UNAVAILABLE", ed.Code)
	assert.Equal(t, http.StatusServiceUnavailable, r.logout(ck), "sign-out says it did not end the session")

	srv.Start()
	require.Eventually(t, func() bool { return r.api(ck) == http.StatusOK }, 10*time.Second, 100*time.Millisecond,
		"Redis back (empty: nothing was revoked): the session holds again")
}
