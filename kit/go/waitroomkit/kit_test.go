package waitroomkit

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// issuer stands in for the api's signing side in these unit tests (the kit
// against the real api is tested in services/dev/stack): a JWKS server whose
// keys a test can rotate, counting its fetches.
type issuer struct {
	mu      sync.Mutex
	keys    map[string]ed25519.PrivateKey
	fetches atomic.Int64
	jwks    http.Handler // serves /.well-known/jwks.json
	srv     *httptest.Server
}

func newIssuer(t *testing.T, kids ...string) *issuer {
	t.Helper()
	is := &issuer{keys: map[string]ed25519.PrivateKey{}}
	for _, kid := range kids {
		is.add(kid)
	}
	is.jwks = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/jwks.json" {
			http.NotFound(w, r)
			return
		}
		is.fetches.Add(1)
		is.mu.Lock()
		defer is.mu.Unlock()
		var set struct {
			Keys []jwk `json:"keys"`
		}
		for kid, k := range is.keys {
			set.Keys = append(set.Keys, jwk{Kty: "OKP", Crv: "Ed25519", Kid: kid, Alg: "EdDSA", Use: "sig",
				X: base64.RawURLEncoding.EncodeToString(k.Public().(ed25519.PublicKey))})
		}
		_ = json.NewEncoder(w).Encode(set)
	})
	is.srv = httptest.NewServer(is.jwks)
	t.Cleanup(is.srv.Close)
	return is
}

func (is *issuer) add(kid string) ed25519.PrivateKey {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys[kid] = priv
	return priv
}

func (is *issuer) drop(kid string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	delete(is.keys, kid)
}

// claimsFor are the claims the api signs (pkg/security/token.IssueAdmission).
func claimsFor(item string, exp time.Time) jwt.MapClaims {
	return jwt.MapClaims{"iss": Issuer, "sub": "alice", "aud": []string{Audience}, "jti": "TOK1", "itm": item,
		"iat": time.Now().Add(-time.Second).Unix(), "exp": exp.Unix()}
}

func sign(t *testing.T, key any, m jwt.SigningMethod, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (is *issuer) token(t *testing.T, kid string, c jwt.MapClaims) string {
	is.mu.Lock()
	k := is.keys[kid]
	is.mu.Unlock()
	return sign(t, k, jwt.SigningMethodEdDSA, kid, c)
}

func TestVerifyOffline(t *testing.T) {
	is := newIssuer(t, "a1")
	kit, err := New(is.srv.URL, WithLeeway(0))
	if err != nil {
		t.Fatal(err)
	}
	live := time.Now().Add(time.Minute)
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	pub := is.keys["a1"].Public().(ed25519.PublicKey)
	with := func(k string, v any) jwt.MapClaims { c := claimsFor("gig", live); c[k] = v; return c }
	without := func(k string) jwt.MapClaims { c := claimsFor("gig", live); delete(c, k); return c }
	cases := []struct {
		name string
		raw  string
		want error
	}{
		{"valid", is.token(t, "a1", claimsFor("gig", live)), nil},
		{"expired", is.token(t, "a1", claimsFor("gig", time.Now().Add(-2*time.Second))), ErrExpired},
		{"forged: another key under the published kid", sign(t, stranger, jwt.SigningMethodEdDSA, "a1", claimsFor("gig", live)), ErrInvalid},
		{"alg none", sign(t, jwt.UnsafeAllowNoneSignatureType, jwt.SigningMethodNone, "a1", claimsFor("gig", live)), ErrInvalid},
		{"HS256 keyed with the public key", sign(t, []byte(pub), jwt.SigningMethodHS256, "a1", claimsFor("gig", live)), ErrInvalid},
		{"another item's", is.token(t, "a1", claimsFor("other", live)), ErrOtherItem},
		{"a queue token (other audience)", is.token(t, "a1", with("aud", []string{"waitroom-queue"})), ErrInvalid},
		{"another issuer", is.token(t, "a1", with("iss", "evil")), ErrInvalid},
		{"no expiry", is.token(t, "a1", without("exp")), ErrInvalid},
		{"no item", is.token(t, "a1", without("itm")), ErrInvalid},
		{"no token id", is.token(t, "a1", without("jti")), ErrInvalid},
		{"no token", "", ErrNoToken},
		{"garbage", "not.a.token", ErrInvalid},
		{"too long", strings.Repeat("a", MaxTokenBytes+1), ErrInvalid},
	}
	for _, c := range cases {
		a, err := kit.VerifyOffline(context.Background(), c.raw, "gig")
		if c.want == nil {
			if err != nil || a.UserID != "alice" || a.ItemID != "gig" || a.TokenID != "TOK1" {
				t.Errorf("%s: got %+v, %v", c.name, a, err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

// settle waits for the fetch of the keys under way, if any.
func (s *keySet) settle() {
	s.mu.Lock()
	done := s.inflight
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}

// A rotation: tokens of a new kid refetch the JWKS once, without a restart;
// unknown kids refetch at most once per interval however many arrive; keys
// older than maxAge are fetched again, in the background; a failing fetch
// keeps the old keys.
func TestKeyRotationWithoutRestart(t *testing.T) {
	is := newIssuer(t, "a1")
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	kit, err := New(is.srv.URL, WithClock(clock), WithKeyRefresh(10*time.Second, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kit.Close() })
	ctx := context.Background()
	exp := now.Add(time.Minute)
	c := claimsFor("gig", exp)
	c["iat"] = now.Unix()
	if _, err := kit.VerifyOffline(ctx, is.token(t, "a1", c), "gig"); err != nil {
		t.Fatal(err)
	}
	if n := is.fetches.Load(); n != 1 {
		t.Fatalf("fetches %d, want 1", n)
	}

	is.add("a2") // the api now signs with a2 and still publishes a1
	advance(11 * time.Second)
	if _, err := kit.VerifyOffline(ctx, is.token(t, "a2", c), "gig"); err != nil {
		t.Fatalf("a token of the new key: %v", err)
	}
	if _, err := kit.VerifyOffline(ctx, is.token(t, "a1", c), "gig"); err != nil {
		t.Fatalf("a token of the old key during the rollover: %v", err)
	}
	if n := is.fetches.Load(); n != 2 {
		t.Fatalf("fetches %d, want 2 (one for the new kid)", n)
	}

	// A flood of unknown kids costs one fetch per interval.
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	advance(11 * time.Second)
	for i := 0; i < 50; i++ {
		if _, err := kit.VerifyOffline(ctx, sign(t, stranger, jwt.SigningMethodEdDSA, "x"+string(rune('a'+i%26)), c), "gig"); !errors.Is(err, ErrInvalid) {
			t.Fatalf("unknown kid: %v", err)
		}
	}
	if n := is.fetches.Load(); n != 3 {
		t.Fatalf("fetches %d after 50 unknown kids, want 3", n)
	}

	// A key added inside the window is seen once the window has passed.
	is.add("a3")
	if _, err := kit.VerifyOffline(ctx, is.token(t, "a3", c), "gig"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("inside the rate-limit window: %v", err)
	}
	advance(11 * time.Second)
	if _, err := kit.VerifyOffline(ctx, is.token(t, "a3", c), "gig"); err != nil {
		t.Fatalf("after the window: %v", err)
	}

	// The old key retired: after maxAge the set is fetched again and a1's
	// tokens are refused.
	is.mu.Lock()
	retired := is.keys["a1"]
	is.mu.Unlock()
	is.drop("a1")
	advance(2 * time.Hour)
	c["iat"] = now.Unix()
	c["exp"] = now.Add(time.Minute).Unix()
	if _, err := kit.VerifyOffline(ctx, is.token(t, "a2", c), "gig"); err != nil {
		t.Fatal(err)
	}
	kit.keys.settle()
	if n := is.fetches.Load(); n != 5 {
		t.Fatalf("fetches %d, want 5 (maxAge passed)", n)
	}
	lateOld := sign(t, retired, jwt.SigningMethodEdDSA, "a1", c)
	if _, err := kit.VerifyOffline(ctx, lateOld, "gig"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a retired key: %v", err)
	}

	// The api down: the keys we have keep working.
	is.srv.Close()
	advance(2 * time.Hour)
	c["iat"] = now.Unix()
	c["exp"] = now.Add(time.Minute).Unix()
	if _, err := kit.VerifyOffline(ctx, is.token(t, "a2", c), "gig"); err != nil {
		t.Fatalf("stale keys while the JWKS cannot be fetched: %v", err)
	}
}
