package waitroomkit

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// autoAPI stands in for the api's register and status routes: register
// answers what answer says (or 409 NOT_AUTO when it is ""), status answers
// status for the place "PLACE1". The stack test runs the real api
// (services/dev/stack, TestAutoModeIsInvisibleUntilALineForms).
type autoAPI struct {
	mu        sync.Mutex
	answer    string // "ADMITTED", "QUEUED" or "" (NOT_AUTO)
	status    string
	admission string
	registers atomic.Int64
	bodies    []map[string]any
	forwarded []string
}

func (a *autoAPI) serve(is *issuer) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("/.well-known/jwks.json", is.jwks)
	mux.HandleFunc("POST /api/v1/items/{itemId}/registrations", func(w http.ResponseWriter, r *http.Request) {
		a.registers.Add(1)
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.bodies, a.forwarded = append(a.bodies, body), append(a.forwarded, r.Header.Get("X-Forwarded-For"))
		switch a.answer {
		case "":
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"error":{"code":"NOT_AUTO","message":"not auto"}}`)
		case "ADMITTED":
			_ = json.NewEncoder(w).Encode(map[string]string{"status": "ADMITTED", "token": "PLACE1", "admissionToken": a.admission})
		default:
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(map[string]string{"status": "QUEUED", "token": "PLACE1"})
		}
	})
	mux.HandleFunc("GET /api/v1/items/{itemId}/registrations/current", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer PLACE1" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"status": a.status, "admissionToken": a.admission})
	})
	return httptest.NewServer(mux)
}

func (a *autoAPI) set(f func(a *autoAPI)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a)
}

// Auto entry in the kit: an item not in mode auto is asked about once per
// 10 s and gets the page; a queued place goes to the page in the fragment
// and a cookie, a return visit reads that place instead of registering, an
// admitted place goes straight through; the admission is checked like any
// other (a forged one gets the page).
func TestAutoEntry(t *testing.T) {
	is := newIssuer(t, "a1")
	api := &autoAPI{}
	srv := api.serve(is)
	t.Cleanup(srv.Close)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	kit, err := New(srv.URL, WithAutoEntry(), WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
	if err != nil {
		t.Fatal(err)
	}
	shop := httptest.NewServer(kit.Protect(Item("gig"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := FromContext(r.Context())
		_, _ = io.WriteString(w, "hello "+a.UserID)
	})))
	t.Cleanup(shop.Close)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func() (int, string) {
		t.Helper()
		resp, err := c.Get(shop.URL + "/shop")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusSeeOther {
			return resp.StatusCode, resp.Header.Get("Location")
		}
		return resp.StatusCode, string(b)
	}
	page := srv.URL + "/items/gig/wait"

	// Not auto: the page, and the api is asked again only after 10 s.
	for range 3 {
		if code, loc := get(); code != http.StatusSeeOther || loc != page {
			t.Fatalf("not auto: %d %s", code, loc)
		}
	}
	if n := api.registers.Load(); n != 1 {
		t.Fatalf("asked %d times within 10 s, want once", n)
	}
	now.Add(int64(11 * time.Second))
	api.set(func(a *autoAPI) { a.answer = "QUEUED"; a.status = "WAITING" })

	// A line: the page with the place, kept for the next visit.
	if code, loc := get(); code != http.StatusSeeOther || loc != page+"#queue=PLACE1" {
		t.Fatalf("queued: %d %s", code, loc)
	}
	api.set(func(a *autoAPI) {
		if got := a.forwarded[len(a.forwarded)-1]; !strings.HasPrefix(got, "127.0.0.1") {
			t.Errorf("X-Forwarded-For %q does not name the visitor", got)
		}
		if id, _ := a.bodies[len(a.bodies)-1]["requestId"].(string); a.bodies[len(a.bodies)-1]["auto"] != true || len(id) < 16 {
			t.Errorf("register body %v", a.bodies[len(a.bodies)-1])
		}
	})
	if code, loc := get(); code != http.StatusSeeOther || loc != page+"#queue=PLACE1" {
		t.Fatalf("back while waiting: %d %s", code, loc)
	}
	if n := api.registers.Load(); n != 2 {
		t.Fatalf("%d registrations, want 2: a return visit makes no new place", n)
	}

	// The place is admitted, but the admission is forged: the page, nobody in.
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	forged := sign(t, stranger, jwt.SigningMethodEdDSA, "a1", claimsFor("gig", time.Now().Add(time.Minute)))
	api.set(func(a *autoAPI) { a.status, a.admission = "ADMITTED", forged })
	if code, _ := get(); code == http.StatusOK {
		t.Fatal("a forged admission let the visitor in")
	}

	// Admitted for real: straight through, and the cookie keeps them in.
	good := is.token(t, "a1", claimsFor("gig", time.Now().Add(time.Minute)))
	api.set(func(a *autoAPI) { a.admission = good })
	for range 2 {
		if code, body := get(); code != http.StatusOK || body != "hello alice" {
			t.Fatalf("admitted: %d %s", code, body)
		}
	}

	// A new visitor while the item has room: the register answer's
	// admission, no page.
	jar, _ = cookiejar.New(nil)
	c.Jar = jar
	api.set(func(a *autoAPI) { a.answer = "ADMITTED" })
	if code, body := get(); code != http.StatusOK || body != "hello alice" {
		t.Fatalf("room: %d %s", code, body)
	}
}
