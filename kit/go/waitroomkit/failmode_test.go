package waitroomkit

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// unreachable is an api address nothing listens on: every call is refused.
func unreachable(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// shopOf is a shop behind kit.Protect for item; it answers what it was let
// through with: "user <id>" for a checked token, "unchecked <why>" else.
func shopOf(t *testing.T, kit *Kit, item string) func(token string) (int, string) {
	t.Helper()
	h := kit.Protect(Item(item))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := FromContext(r.Context())
		if a.Unchecked != "" {
			_, _ = io.WriteString(w, "unchecked "+a.Unchecked)
			return
		}
		_, _ = io.WriteString(w, "user "+a.UserID)
	}))
	return func(token string) (int, string) {
		r := httptest.NewRequest(http.MethodGet, "/shop", nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, strings.TrimSpace(w.Body.String())
	}
}

// The api unreachable: an item that fails closed holds everyone (a token the
// kit cannot check: 503; no token: the waiting page), one that fails open
// lets them through unchecked, once the kit knows the room is down. Fail
// open never passes a token the kit can check and refuses.
func TestFailOpenAndFailClosedWithTheAPIUnreachable(t *testing.T) {
	is := newIssuer(t, "a1")
	tok := is.token(t, "a1", claimsFor("gig", time.Now().Add(time.Hour)))
	api := unreachable(t)
	opts := []Option{WithKeyRefreshTimeout(300 * time.Millisecond), WithWaitURL("https://queue.example")}
	closed, err := New(api, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closed.Close() })
	open, err := New(api, append(opts, WithFailMode(FailOpen))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = open.Close() })
	shopClosed, shopOpen := shopOf(t, closed, "gig"), shopOf(t, open, "gig")

	if code, body := shopOpen(""); code != http.StatusOK || body != "unchecked fail-open" {
		t.Fatalf("fail open, no token, room unreachable: %d %q, want through (the kit asks the room first)", code, body)
	}
	if code, _ := shopClosed(tok); code != http.StatusServiceUnavailable {
		t.Fatalf("fail closed, a token the kit cannot check: %d, want 503", code)
	}
	if code, body := shopOpen(tok); code != http.StatusOK || body != "unchecked fail-open" {
		t.Fatalf("fail open, a token the kit cannot check: %d %q", code, body)
	}
	// Now both know the room is down (their key fetch failed).
	if code, _ := shopClosed(""); code != http.StatusSeeOther {
		t.Fatalf("fail closed, no token: %d, want 303", code)
	}
	if code, body := shopOpen(""); code != http.StatusOK || body != "unchecked fail-open" {
		t.Fatalf("fail open, no token, room down: %d %q", code, body)
	}

	// Keys held, then the api gone: tokens are checked offline as ever.
	api2 := newStubAPI(t, is)
	open2, err := New(api2.srv.URL, WithFailMode(FailOpen), WithKeyRefreshTimeout(300*time.Millisecond),
		WithKeyRefresh(time.Second, time.Millisecond), WithKeyBackoff(time.Millisecond, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = open2.Close() })
	if err := open2.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	api2.down.Store(true)
	_ = open2.Refresh(context.Background()) // fails: the room is known down
	shop2 := shopOf(t, open2, "gig")
	if code, body := shop2(tok); code != http.StatusOK || body != "user alice" {
		t.Fatalf("a valid token on held keys: %d %q", code, body)
	}
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	forged := sign(t, other, jwt.SigningMethodEdDSA, "a1", claimsFor("gig", time.Now().Add(time.Hour)))
	if code, _ := shop2(forged); code != http.StatusSeeOther {
		t.Fatalf("a forged token while failing open: %d, want 303 (refused, not passed)", code)
	}
}

// A visitor without a token on an item that fails open: while the room was
// heard from less than minRefresh ago the kit sends them to the waiting page
// without asking; once that long has passed it asks again, and a room gone
// since lets them through at once, not only when the keys reach maxAge.
func TestFailOpenWithoutATokenAsksTheRoomAfterMinRefresh(t *testing.T) {
	is := newIssuer(t, "a1")
	api := newStubAPI(t, is)
	const minRefresh = 2 * time.Second
	kit, err := New(api.srv.URL, WithFailMode(FailOpen), WithKeyRefreshTimeout(300*time.Millisecond),
		WithKeyRefresh(minRefresh, time.Hour), WithWaitURL("https://queue.example"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kit.Close() })
	if err := kit.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	shop := shopOf(t, kit, "gig")
	if code, _ := shop(""); code != http.StatusSeeOther {
		t.Fatalf("room up, no token: %d, want 303 to the waiting page", code)
	}
	api.down.Store(true)
	if code, _ := shop(""); code != http.StatusSeeOther {
		t.Fatalf("room just heard from, no token: %d, want 303 (not asked again within minRefresh)", code)
	}
	time.Sleep(minRefresh + 100*time.Millisecond)
	if code, body := shop(""); code != http.StatusOK || body != "unchecked fail-open" {
		t.Fatalf("room down for longer than minRefresh, no token: %d %q, want through unchecked", code, body)
	}
}

// flagFile writes a flag signed with key to path.
func flagFile(t *testing.T, path string, key ed25519.PrivateKey, f Flag) {
	t.Helper()
	s, err := SignFlag(key, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The off switch from a signed flag file, with the api (and so the room's
// Kafka and Redis behind it) unreachable: "through" lets everyone in, even
// without a token; "paused" shows the paused page, even to a token holder.
// A forged flag, an older one replayed, or the file gone keep the last good
// flag; a per-item fail mode overrides the flag's default.
func TestOffSwitchFromASignedFlagWithTheRoomDown(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	path := filepath.Join(t.TempDir(), "flag.jws")
	t0 := time.Now().Add(-time.Minute)
	flagFile(t, path, key, Flag{IssuedAt: t0, Items: map[string]ItemFlag{"gig": {Off: OffThrough}}})
	kit, err := New(unreachable(t), WithFlag(path, pub, time.Hour), WithKeyRefreshTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kit.Close() })
	ctx := context.Background()
	if err := kit.RefreshFlag(ctx); err != nil {
		t.Fatal(err)
	}
	gig, other := shopOf(t, kit, "gig"), shopOf(t, kit, "other")
	if code, body := gig(""); code != http.StatusOK || body != "unchecked off-switch" {
		t.Fatalf("off through, no token: %d %q", code, body)
	}
	if code, _ := other(""); code != http.StatusSeeOther {
		t.Fatalf("an item the flag does not switch: %d, want 303", code)
	}

	flagFile(t, path, key, Flag{IssuedAt: t0.Add(time.Second), Items: map[string]ItemFlag{"gig": {Off: OffPaused}}})
	if err := kit.RefreshFlag(ctx); err != nil {
		t.Fatal(err)
	}
	is := newIssuer(t, "a1")
	tok := is.token(t, "a1", claimsFor("gig", time.Now().Add(time.Hour)))
	paused := func(why string) {
		t.Helper()
		code, body := gig(tok)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "The sale is paused") {
			t.Fatalf("%s: %d %q, want the paused page", why, code, body)
		}
	}
	paused("off paused")

	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	flagFile(t, path, otherKey, Flag{IssuedAt: t0.Add(2 * time.Second), Items: map[string]ItemFlag{"gig": {Off: OffThrough}}})
	if err := kit.RefreshFlag(ctx); err == nil || !strings.Contains(err.Error(), "verify") {
		t.Fatalf("a forged flag: %v", err)
	}
	paused("after a forged flag")
	flagFile(t, path, key, Flag{IssuedAt: t0, Items: map[string]ItemFlag{"gig": {Off: OffThrough}}})
	if err := kit.RefreshFlag(ctx); err == nil || !strings.Contains(err.Error(), "older than the one held") {
		t.Fatalf("a replayed older flag: %v", err)
	}
	paused("after a replayed flag")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := kit.RefreshFlag(ctx); err == nil {
		t.Fatal("a missing file: no error")
	}
	paused("with the file gone")

	// Default fail open, one item closed: with the room down.
	flagFile(t, path, key, Flag{IssuedAt: t0.Add(3 * time.Second), Default: ItemFlag{FailMode: FailOpen},
		Items: map[string]ItemFlag{"vip": {FailMode: FailClosed}}})
	if err := kit.RefreshFlag(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := gig(tok); code != http.StatusOK || body != "unchecked fail-open" {
		t.Fatalf("default fail open: %d %q", code, body)
	}
	if code, _ := shopOf(t, kit, "vip")(tok); code != http.StatusServiceUnavailable {
		t.Fatalf("vip fails closed: %d, want 503", code)
	}
}

// A flag served over HTTP is reread in the background when stale (no
// request waits for it) and kept while its host is gone.
func TestFlagFromAURLRereadInTheBackgroundAndKept(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	cur := make(chan string, 1)
	sign := func(off string, at time.Time) {
		s, err := SignFlag(key, Flag{IssuedAt: at, Items: map[string]ItemFlag{"gig": {Off: off}}})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-cur:
		default:
		}
		cur <- s
	}
	sign(OffPaused, time.Now().Add(-time.Minute))
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := <-cur
		cur <- s
		_, _ = io.WriteString(w, s)
	}))
	kit, err := New(unreachable(t), WithFlag(host.URL+"/flag", pub, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kit.Close() })
	if err := kit.RefreshFlag(context.Background()); err != nil {
		t.Fatal(err)
	}
	gig := shopOf(t, kit, "gig")
	if code, _ := gig(""); code != http.StatusServiceUnavailable {
		t.Fatalf("paused: %d", code)
	}
	sign(OffThrough, time.Now())
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := gig("")
		if code == http.StatusOK && body == "unchecked off-switch" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new flag never took: %d %q", code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	host.Close()
	if err := kit.RefreshFlag(context.Background()); err == nil {
		t.Fatal("the host is gone: no error")
	}
	if code, body := gig(""); code != http.StatusOK || body != "unchecked off-switch" {
		t.Fatalf("the last good flag is kept: %d %q", code, body)
	}
	f, ok := kit.CurrentFlag()
	if !ok || f.Items["gig"].Off != OffThrough {
		t.Fatalf("CurrentFlag: %+v %v", f, ok)
	}
}
