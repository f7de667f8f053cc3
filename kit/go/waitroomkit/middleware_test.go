package waitroomkit

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The middleware's ways in: the continue link's ?admission= becomes an
// HttpOnly cookie and leaves the address bar; the cookie lets the next
// requests through; a bearer works for API clients; the rest is sent to the
// item's waiting page.
func TestProtect(t *testing.T) {
	is := newIssuer(t, "a1")
	kit, err := New(is.srv.URL, WithWaitURL("https://queue.example"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/shop/{itemId}", kit.Protect(ItemFromPath("itemId"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := FromContext(r.Context())
		_, _ = io.WriteString(w, "hello "+a.UserID+" "+a.ItemID)
	})))
	shop := httptest.NewServer(mux)
	t.Cleanup(shop.Close)
	jar, _ := cookiejar.New(nil)
	noFollow := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c := &http.Client{Jar: jar, CheckRedirect: noFollow, Timeout: 5 * time.Second}
	get := func(path string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, shop.URL+path, nil)
		if len(hdr) == 2 {
			req.Header.Set(hdr[0], hdr[1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	body := func(r *http.Response) string { b, _ := io.ReadAll(r.Body); return string(b) }

	resp := get("/shop/gig")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "https://queue.example/items/gig/wait" {
		t.Fatalf("no token: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	tok := is.token(t, "a1", claimsFor("gig", time.Now().Add(time.Minute)))
	resp = get("/shop/gig?x=1&admission=" + url.QueryEscape(tok))
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/shop/gig?x=1" {
		t.Fatalf("the token leaves the URL: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		cookie = ck
	}
	if cookie == nil || cookie.Name != "waitroom_admission_gig" || !cookie.HttpOnly || cookie.SameSite != http.SameSiteLaxMode {
		t.Fatalf("cookie %+v", cookie)
	}
	if resp = get("/shop/gig?x=1"); resp.StatusCode != http.StatusOK || body(resp) != "hello alice gig" {
		t.Fatalf("with the cookie: %d", resp.StatusCode)
	}
	if resp = get("/shop/other"); resp.StatusCode != http.StatusSeeOther || !strings.HasSuffix(resp.Header.Get("Location"), "/items/other/wait") {
		t.Fatalf("another item: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	jar2, _ := cookiejar.New(nil)
	c.Jar = jar2
	if resp = get("/shop/gig", "Authorization", "Bearer "+tok); resp.StatusCode != http.StatusOK {
		t.Fatalf("bearer: %d", resp.StatusCode)
	}
	if resp = get("/shop/gig", "Authorization", "Bearer "+tok+"x"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a broken bearer: %d", resp.StatusCode)
	}

	// The keys cannot be fetched at all: 503, not a redirect loop.
	is.srv.Close()
	cold, _ := New(is.srv.URL)
	h := cold.Protect(Item("gig"))(http.NotFoundHandler())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/shop/gig", nil).WithContext(t.Context()))
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("no token at all is still a redirect: %d", rec.Code)
	}
	req := httptest.NewRequest(http.MethodGet, "/shop/gig", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("JWKS unreachable: %d", rec.Code)
	}
}

func TestCookieName(t *testing.T) {
	k, err := New("https://x")
	if err != nil {
		t.Fatal(err)
	}
	for item, want := range map[string]string{"gig": "waitroom_admission_gig", "a:b": "waitroom_admission_a_b", "x.y-z": "waitroom_admission_x.y-z"} {
		if got := k.cookieName(item); got != want {
			t.Errorf("%s: %s, want %s", item, got, want)
		}
	}
}

// The token parser never panics and accepts nothing it was not given by
// the key's holder.
func FuzzVerifyOffline(f *testing.F) {
	f.Add("eyJhbGciOiJFZERTQSIsImtpZCI6ImExIn0.e30.AAAA")
	f.Add("a.b.c")
	f.Add("")
	set := `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a1","alg":"EdDSA","use":"sig","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, set) }))
	defer srv.Close()
	kit, _ := New(srv.URL)
	f.Fuzz(func(t *testing.T, raw string) {
		if a, err := kit.VerifyOffline(t.Context(), raw, ""); err == nil {
			t.Fatalf("accepted %q as %+v", raw, a)
		}
	})
}
