package waitroomkit

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stubAPI is the waitroom api as the kit sees it: is's JWKS and the online
// verify. While down, every request hangs until its client gives up.
type stubAPI struct {
	is        *issuer
	down      atomic.Bool
	hung      atomic.Int64 // JWKS requests that hung
	abandoned atomic.Int64 // hung requests their client gave up on
	stop      chan struct{}
	srv       *httptest.Server
}

func newStubAPI(t *testing.T, is *issuer) *stubAPI {
	t.Helper()
	a := &stubAPI{is: is, stop: make(chan struct{})}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.down.Load() {
			if r.URL.Path == "/.well-known/jwks.json" {
				a.hung.Add(1)
			}
			select {
			case <-r.Context().Done():
				a.abandoned.Add(1)
			case <-a.stop:
			}
			return
		}
		switch r.URL.Path {
		case "/.well-known/jwks.json":
			is.jwks.ServeHTTP(w, r)
		case "/api/v1/admissions/verify":
			var in struct{ Token, ItemID string }
			_ = json.NewDecoder(r.Body).Decode(&in)
			_ = json.NewEncoder(w).Encode(map[string]string{"itemId": in.ItemID, "userId": "alice", "tokenId": "TOK1"})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() { close(a.stop); a.srv.Close() })
	return a
}

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func noFollow(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// The api down (every request to it hangs): a visitor with a cookie keeps
// shopping on the keys the kit holds, past their max age, and keeps the
// cookie; the kit fetches the keys once per backoff, in the background; a
// token of a kid the kit does not hold waits at most the refresh timeout
// (503, its cookie kept); a kit with no keys at all answers each request
// within the refresh timeout too.
func TestAPIDownKeepsCookieAndStaleKeysWithoutWaiting(t *testing.T) {
	const timeout = 400 * time.Millisecond
	bound := 5 * timeout // generous: the point is "not the client's 5 s, not forever"
	is := newIssuer(t, "a1")
	api := newStubAPI(t, is)
	clock := &fakeClock{now: time.Now()}
	kit, err := New(api.srv.URL, WithOnlineVerify(), WithOnlineVerifyTimeout(timeout), WithKeyRefreshTimeout(timeout),
		WithKeyRefresh(time.Second, time.Minute), WithKeyBackoff(time.Second, time.Minute), WithClock(clock.Now),
		WithWaitURL("https://queue.example"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kit.Close() })
	shop := httptest.NewServer(kit.Protect(Item("gig"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := FromContext(r.Context())
		_, _ = io.WriteString(w, "hello "+a.UserID)
	})))
	t.Cleanup(shop.Close)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: noFollow, Timeout: 30 * time.Second}
	shopURL, _ := url.Parse(shop.URL)
	cookieOf := func() string {
		for _, c := range jar.Cookies(shopURL) {
			if c.Name == "waitroom_admission_gig" {
				return c.Value
			}
		}
		return ""
	}
	// get does one request, checks it took less than bound, and returns
	// its status, body and Set-Cookie headers.
	get := func(c *http.Client, req *http.Request) (int, string, []string) {
		t.Helper()
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if took := time.Since(start); took > bound {
			t.Fatalf("%s took %s, more than %s with a refresh timeout of %s", req.URL, took, bound, timeout)
		}
		return resp.StatusCode, string(b), resp.Header.Values("Set-Cookie")
	}
	req := func(path string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, shop.URL+path, nil)
		return r
	}

	tok := is.token(t, "a1", claimsFor("gig", time.Now().Add(time.Hour)))
	if code, _, _ := get(browser, req("/shop/gig?admission="+url.QueryEscape(tok))); code != http.StatusSeeOther || cookieOf() != tok {
		t.Fatalf("admitted by the link: %d, cookie %q", code, cookieOf())
	}
	if code, body, _ := get(browser, req("/shop/gig")); code != http.StatusOK || body != "hello alice" {
		t.Fatalf("with the cookie, api up: %d %q", code, body)
	}
	if n := is.fetches.Load(); n != 1 {
		t.Fatalf("JWKS fetched %d times, want 1", n)
	}

	api.down.Store(true)
	clock.Advance(2 * time.Minute) // the keys are past their max age
	for i := range 4 {
		code, body, set := get(browser, req("/shop/gig"))
		if code != http.StatusOK || body != "hello alice" || len(set) != 0 {
			t.Fatalf("request %d with the cookie, api down: %d %q, Set-Cookie %q", i, code, body, set)
		}
		if cookieOf() != tok {
			t.Fatalf("request %d: the cookie is gone", i)
		}
	}
	kit.keys.settle()
	if n := api.hung.Load(); n != 1 {
		t.Fatalf("JWKS tried %d times during the outage's first backoff, want 1 (in the background)", n)
	}
	clock.Advance(time.Second) // the first backoff has passed
	if code, _, _ := get(browser, req("/shop/gig")); code != http.StatusOK {
		t.Fatalf("after the backoff: %d", code)
	}
	kit.keys.settle()
	if n := api.hung.Load(); n != 2 {
		t.Fatalf("JWKS tried %d times after the backoff, want 2", n)
	}
	clock.Advance(time.Second) // the second backoff is 2 s: not yet
	if code, _, _ := get(browser, req("/shop/gig")); code != http.StatusOK {
		t.Fatalf("inside the second backoff: %d", code)
	}
	kit.keys.settle()
	if n := api.hung.Load(); n != 2 {
		t.Fatalf("JWKS tried %d times inside the second backoff, want still 2", n)
	}

	// A token of a key the kit never saw (the api rotated before it went
	// down): the kit cannot say, so 503, and the cookie stays.
	is.add("a2")
	rotated := is.token(t, "a2", claimsFor("gig", time.Now().Add(time.Hour)))
	clock.Advance(2 * time.Second)
	r := req("/shop/gig")
	r.AddCookie(&http.Cookie{Name: "waitroom_admission_gig", Value: rotated})
	code, _, set := get(&http.Client{CheckRedirect: noFollow}, r)
	if code != http.StatusServiceUnavailable || len(set) != 0 {
		t.Fatalf("a cookie of an unknown kid, api down: %d, Set-Cookie %q", code, set)
	}
	if n := api.hung.Load(); n != 3 {
		t.Fatalf("JWKS tried %d times for the unknown kid, want 3", n)
	}
	// A token that is plainly refused still loses its cookie.
	r = req("/shop/gig")
	r.AddCookie(&http.Cookie{Name: "waitroom_admission_gig", Value: tok + "x"})
	if code, _, set := get(&http.Client{CheckRedirect: noFollow}, r); code != http.StatusSeeOther || len(set) != 1 || !strings.Contains(set[0], "Max-Age=0") {
		t.Fatalf("a forged cookie, api down: %d, Set-Cookie %q", code, set)
	}

	// No keys at all: each request waits at most the refresh timeout.
	cold, err := New(api.srv.URL, WithKeyRefreshTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cold.Close() })
	for i := range 3 {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/shop/gig", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		start := time.Now()
		cold.Protect(Item("gig"))(http.NotFoundHandler()).ServeHTTP(rec, r)
		if took := time.Since(start); took > bound {
			t.Fatalf("cold request %d took %s, more than %s", i, took, bound)
		}
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("cold request %d: %d", i, rec.Code)
		}
	}
}

// Close ends a fetch under way (here one that would hang for a minute) and
// returns once it has; Start keeps the keys fresh until its context ends.
func TestCloseStopsFetchesAndStartRefreshes(t *testing.T) {
	is := newIssuer(t, "a1")
	api := newStubAPI(t, is)
	api.down.Store(true)
	kit, err := New(api.srv.URL, WithKeyRefreshTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := kit.Refresh(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("refresh against a hanging api: %v", err)
	}
	closed := make(chan struct{})
	go func() { _ = kit.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not end the hanging fetch")
	}
	waitFor(t, func() bool { return api.abandoned.Load() == 1 }, "the hanging fetch is abandoned")
	if _, err := kit.VerifyOffline(t.Context(), is.token(t, "a1", claimsFor("gig", time.Now().Add(time.Minute))), "gig"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a closed kit with no keys: %v", err)
	}

	api.down.Store(false)
	fresh, err := New(api.srv.URL, WithKeyRefresh(time.Second, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(t.Context())
	fresh.Start(runCtx)
	waitFor(t, func() bool { return is.fetches.Load() >= 3 }, "Start fetches the keys again and again")
	if _, err := fresh.VerifyOffline(t.Context(), is.token(t, "a1", claimsFor("gig", time.Now().Add(time.Minute))), "gig"); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := fresh.Close(); err != nil {
		t.Fatal(err)
	}
	n := is.fetches.Load()
	time.Sleep(300 * time.Millisecond) // six max ages: a loop still running would fetch
	if m := is.fetches.Load(); m != n {
		t.Fatalf("fetches went on after Close: %d → %d", n, m)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBackoffDoublesUpToItsCap(t *testing.T) {
	s := newKeySet("https://x")
	s.backoffMin, s.backoffMax = time.Second, time.Minute
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		6: 32 * time.Second, 7: time.Minute, 1000: time.Minute} {
		if got := s.backoff(n); got != want {
			t.Errorf("after %d failures: %s, want %s", n, got, want)
		}
	}
}

// The api and the JWKS must be https but on loopback: over plain http
// anyone on the path could serve their own keys.
func TestNewRefusesPlainHTTPOffLoopback(t *testing.T) {
	for _, c := range []struct {
		api, jwks string
		ok        bool
	}{
		{"https://queue.example.com", "", true},
		{"http://127.0.0.1:8080", "", true},
		{"http://127.9.9.9", "", true},
		{"http://[::1]:8080", "", true},
		{"http://localhost:8080", "", true},
		{"http://queue.example.com", "", false},
		{"http://10.0.0.1", "", false},
		{"http://localhost.example.com", "", false},
		{"http://[::2]", "", false},
		{"ftp://queue.example.com", "", false},
		{"https://", "", false},
		{"https://queue.example.com", "http://keys.example.com/jwks.json", false},
		{"https://queue.example.com", "http://127.0.0.1/jwks.json", true},
		{"https://queue.example.com", "https://keys.example.com/jwks.json", true},
	} {
		var opts []Option
		if c.jwks != "" {
			opts = append(opts, WithJWKSURL(c.jwks))
		}
		k, err := New(c.api, opts...)
		if (err == nil) != c.ok {
			t.Errorf("api %q, jwks %q: %v, want ok=%v", c.api, c.jwks, err, c.ok)
		}
		if k != nil {
			_ = k.Close()
		}
	}
}

// A link with another admission does not replace a live cookie (session
// fixation): the cookie's admission is used, the link's token dropped from
// the URL and never stored. A cookie that no longer works is replaced.
func TestLinkDoesNotReplaceLiveCookie(t *testing.T) {
	is := newIssuer(t, "a1")
	kit, err := New(is.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kit.Close() })
	shop := httptest.NewServer(kit.Protect(Item("gig"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := FromContext(r.Context())
		_, _ = io.WriteString(w, a.UserID+" "+a.TokenID)
	})))
	t.Cleanup(shop.Close)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: noFollow, Timeout: 10 * time.Second}
	do := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := browser.Get(shop.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	exp := time.Now().Add(time.Hour)
	alice := is.token(t, "a1", claimsFor("gig", exp))
	mallory := claimsFor("gig", exp)
	mallory["sub"], mallory["jti"] = "mallory", "TOK2"
	malloryTok := is.token(t, "a1", mallory)

	if resp, _ := do("/shop/gig?admission=" + url.QueryEscape(alice)); len(resp.Cookies()) != 1 {
		t.Fatalf("alice's link sets her cookie: %d %v", resp.StatusCode, resp.Header.Values("Set-Cookie"))
	}
	resp, _ := do("/shop/gig?x=1&admission=" + url.QueryEscape(malloryTok))
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/shop/gig?x=1" || len(resp.Header.Values("Set-Cookie")) != 0 {
		t.Fatalf("mallory's link: %d %q, Set-Cookie %q", resp.StatusCode, resp.Header.Get("Location"), resp.Header.Values("Set-Cookie"))
	}
	if _, body := do("/shop/gig?x=1"); body != "alice TOK1" {
		t.Fatalf("after mallory's link the shop serves %q, want alice's admission", body)
	}
	// On a POST the link's token is not redirected away: still alice's.
	pr, err := browser.Post(shop.URL+"/shop/gig?admission="+url.QueryEscape(malloryTok), "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(pr.Body)
	pr.Body.Close()
	if string(b) != "alice TOK1" || len(pr.Header.Values("Set-Cookie")) != 0 {
		t.Fatalf("a POST with mallory's token: %q, Set-Cookie %q", b, pr.Header.Values("Set-Cookie"))
	}

	// Alice's admission completed here: her cookie no longer works, so a
	// new link (her next admission) takes its place.
	kit.markCompleted("TOK1", exp)
	if resp, _ := do("/shop/gig?admission=" + url.QueryEscape(malloryTok)); len(resp.Cookies()) != 1 || resp.Cookies()[0].Value != malloryTok {
		t.Fatalf("a dead cookie is replaced by the link: %v", resp.Header.Values("Set-Cookie"))
	}
	if _, body := do("/shop/gig"); body != "mallory TOK2" {
		t.Fatalf("after the replacement: %q", body)
	}
}
