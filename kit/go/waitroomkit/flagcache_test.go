package waitroomkit

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A restarted site keeps the operator's switch with the flag's source gone
// (its static host down, the file not yet restored): the cache (WithFlagCache)
// holds the last good flag, a kit built on it has the flag before any read,
// and an older flag the source serves afterwards is refused as a replay.
func TestFlagCacheSurvivesARestart(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	src, cache := filepath.Join(dir, "flag.jws"), filepath.Join(dir, "cache", "flag.jws")
	if err := os.Mkdir(filepath.Dir(cache), 0o755); err != nil {
		t.Fatal(err)
	}
	api := unreachable(t)
	ctx := context.Background()
	start := func() *Kit {
		t.Helper()
		kit, err := New(api, WithFlag(src, pub, time.Hour), WithFlagCache(cache), WithKeyRefreshTimeout(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = kit.Close() })
		return kit
	}
	t0 := time.Now().Add(-time.Minute)

	first := start()
	if _, ok := first.CurrentFlag(); ok {
		t.Fatal("no cache yet: no flag before the first read")
	}
	flagFile(t, src, key, Flag{IssuedAt: t0, Items: map[string]ItemFlag{"gig": {Off: OffPaused}}})
	if err := first.RefreshFlag(ctx); err != nil {
		t.Fatal(err)
	}
	kept, err := os.ReadFile(cache)
	if err != nil {
		t.Fatalf("the flag read is cached: %v", err)
	}
	if f, err := VerifyFlag(string(kept), pub); err != nil || f.Items["gig"].Off != OffPaused {
		t.Fatalf("the cache holds %+v (%v), want gig paused", f, err)
	}
	_ = first.Close()

	// Restart with the source gone: paused from the first request on.
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	second := start()
	if f, ok := second.CurrentFlag(); !ok || f.Items["gig"].Off != OffPaused {
		t.Fatalf("after a restart: %+v %v, want the cached flag", f, ok)
	}
	if code, body := shopOf(t, second, "gig")(""); code != http.StatusServiceUnavailable || !strings.Contains(body, "The sale is paused") {
		t.Fatalf("after a restart with the source gone: %d %q, want the paused page", code, body)
	}
	if err := second.RefreshFlag(ctx); err == nil {
		t.Fatal("the source is gone: an error")
	}
	if f, _ := second.CurrentFlag(); f.Items["gig"].Off != OffPaused {
		t.Fatal("the cached flag is kept through a failed read")
	}

	// The replay guard holds across the restart: an older flag is refused.
	flagFile(t, src, key, Flag{IssuedAt: t0.Add(-time.Second), Items: map[string]ItemFlag{"gig": {Off: OffThrough}}})
	if err := second.RefreshFlag(ctx); err == nil || !strings.Contains(err.Error(), "older than the one held") {
		t.Fatalf("an older flag after a restart: %v", err)
	}
	// A newer one is taken and replaces the cache.
	flagFile(t, src, key, Flag{IssuedAt: t0.Add(time.Second), Items: map[string]ItemFlag{"gig": {Off: OffThrough}}})
	if err := second.RefreshFlag(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := shopOf(t, second, "gig")(""); code != http.StatusOK || body != "unchecked off-switch" {
		t.Fatalf("switched through: %d %q", code, body)
	}
	_ = second.Close()
	if f, ok := start().CurrentFlag(); !ok || f.Items["gig"].Off != OffThrough {
		t.Fatalf("restarted again: %+v %v, want the newer flag", f, ok)
	}

	// A cache that does not verify is no flag (a forged file cannot switch a site).
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	flagFile(t, cache, otherKey, Flag{IssuedAt: time.Now(), Default: ItemFlag{Off: OffThrough}})
	if _, ok := start().CurrentFlag(); ok {
		t.Fatal("a forged cache was taken")
	}
	if _, err := New(api, WithFlagCache(cache)); err == nil {
		t.Fatal("WithFlagCache without WithFlag: no error")
	}
	entries, _ := os.ReadDir(filepath.Dir(cache))
	if len(entries) != 1 {
		t.Fatalf("the cache's directory holds %d files, want 1 (no temporary file left)", len(entries))
	}
}
