package waitroomkit

import (
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// verifyAssertion checks raw as waitroom's api does: the algorithm pinned,
// the issuer, the audience, exp and iat required.
func verifyAssertion(t *testing.T, raw string, alg string, key any) (jwt.MapClaims, *jwt.Token) {
	t.Helper()
	c := jwt.MapClaims{}
	tok, err := jwt.NewParser(jwt.WithValidMethods([]string{alg}), jwt.WithIssuer("shop.example"),
		jwt.WithAudience(AssertionAudience), jwt.WithExpirationRequired(), jwt.WithIssuedAt()).
		ParseWithClaims(raw, c, func(*jwt.Token) (any, error) { return key, nil })
	if err != nil {
		t.Fatalf("the assertion does not verify: %v", err)
	}
	return c, tok
}

// An assertion carries the contract's claims and verifies with golang-jwt
// with the HS256 secret or the Ed25519 public key; each has its own jti.
func TestAssertionClaimsAndSignature(t *testing.T) {
	secret := []byte(strings.Repeat("s", 32))
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now().Truncate(time.Second)
	clock := WithAssertionClock(func() time.Time { return now })
	for _, c := range []struct {
		name      string
		key, ver  any
		alg, kid  string
		opts      []AsserterOption
		wantTTL   time.Duration
		wantNoKid bool
	}{
		{name: "HS256", key: secret, ver: secret, alg: "HS256", opts: []AsserterOption{clock}, wantTTL: 2 * time.Minute, wantNoKid: true},
		{name: "EdDSA with a kid", key: priv, ver: pub, alg: "EdDSA", kid: "site1",
			opts: []AsserterOption{clock, WithAssertionKID("site1"), WithAssertionTTL(10 * time.Minute)}, wantTTL: 10 * time.Minute},
	} {
		as, err := NewAsserter("shop.example", c.key, c.opts...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		raw, err := as.Assert("user:42", "gig")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		claims, tok := verifyAssertion(t, raw, c.alg, c.ver)
		if kid, has := tok.Header["kid"]; c.wantNoKid == has || (has && kid != c.kid) {
			t.Errorf("%s: header %v", c.name, tok.Header)
		}
		if claims["sub"] != "user:42" || claims["itm"] != "gig" || claims["aud"] != AssertionAudience || claims["iss"] != "shop.example" {
			t.Errorf("%s: claims %v", c.name, claims)
		}
		iat, _ := claims.GetIssuedAt()
		exp, _ := claims.GetExpirationTime()
		if !iat.Time.Equal(now) || exp.Sub(iat.Time) != c.wantTTL {
			t.Errorf("%s: iat %v exp %v, want %v and a TTL of %s", c.name, iat, exp, now, c.wantTTL)
		}
		jti, _ := claims["jti"].(string)
		if !regexp.MustCompile(`^[A-Za-z0-9_-]{22}$`).MatchString(jti) {
			t.Errorf("%s: jti %q is not 128 bits of base64url", c.name, jti)
		}
		again, _ := as.Assert("user:42", "gig")
		if c2, _ := verifyAssertion(t, again, c.alg, c.ver); c2["jti"] == jti {
			t.Errorf("%s: two assertions share the jti %q", c.name, jti)
		}
		// Another key does not verify it.
		if _, err := jwt.Parse(raw, func(*jwt.Token) (any, error) { return []byte(strings.Repeat("x", 32)), nil },
			jwt.WithValidMethods([]string{c.alg})); err == nil {
			t.Errorf("%s: verifies with another secret", c.name)
		}
	}
}

func TestAsserterRefuses(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	secret := []byte(strings.Repeat("s", 32))
	valid, err := NewAsserter("shop", secret)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() error{
		"a short secret":           func() error { _, err := NewAsserter("shop", secret[:31]); return err },
		"an Ed25519 public key":    func() error { _, err := NewAsserter("shop", priv.Public()); return err },
		"a string secret":          func() error { _, err := NewAsserter("shop", string(secret)); return err },
		"no issuer":                func() error { _, err := NewAsserter("", secret); return err },
		"a TTL over 10 min":        func() error { _, err := NewAsserter("shop", secret, WithAssertionTTL(11*time.Minute)); return err },
		"a zero TTL":               func() error { _, err := NewAsserter("shop", secret, WithAssertionTTL(0)); return err },
		"an empty user":            func() error { _, err := valid.Assert("", "gig"); return err },
		"a user with a space":      func() error { _, err := valid.Assert("al ice", "gig"); return err },
		"a user of 65 characters":  func() error { _, err := valid.Assert(strings.Repeat("a", 65), "gig"); return err },
		"an item of 65 characters": func() error { _, err := valid.Assert("alice", strings.Repeat("a", 65)); return err },
		"an item with a slash":     func() error { _, err := valid.Assert("alice", "a/b"); return err },
		"WithAssertions without a user function": func() error {
			_, err := New("https://queue.example", WithAssertions(valid, nil))
			return err
		},
	} {
		if f() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := valid.Assert(strings.Repeat("a", 64), "x.y_z:1-2"); err != nil {
		t.Errorf("the longest user id: %v", err)
	}
}

// Protect's redirect to the waiting page carries an assertion for the user
// the site knows, and none for one it does not.
func TestRedirectCarriesAssertionForKnownUser(t *testing.T) {
	secret := []byte(strings.Repeat("k", 40))
	as, err := NewAsserter("shop.example", secret)
	if err != nil {
		t.Fatal(err)
	}
	kit, err := New("https://queue.example", WithAssertions(as, func(r *http.Request) (string, bool) {
		u := r.Header.Get("X-User") // the site's own session, in a test
		return u, u != ""
	}))
	if err != nil {
		t.Fatal(err)
	}
	h := kit.Protect(Item("gig"))(http.NotFoundHandler())
	redirect := func(user string) *url.URL {
		t.Helper()
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/shop/gig", nil)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusSeeOther {
			t.Fatalf("%q: %d", user, rec.Code)
		}
		u, err := url.Parse(rec.Header().Get("Location"))
		if err != nil {
			t.Fatal(err)
		}
		return u
	}

	u := redirect("alice")
	if u.Scheme+"://"+u.Host+u.Path != "https://queue.example/items/gig/wait" {
		t.Fatalf("redirect %s", u)
	}
	claims, _ := verifyAssertion(t, u.Query().Get(AssertionParam), "HS256", secret)
	if claims["sub"] != "alice" || claims["itm"] != "gig" {
		t.Fatalf("the redirect's assertion says %v", claims)
	}
	if u := redirect(""); u.String() != "https://queue.example/items/gig/wait" {
		t.Fatalf("an unknown user: %s", u)
	}
	if u := redirect("not an id"); u.RawQuery != "" {
		t.Fatalf("a user id that cannot be asserted: %s", u)
	}
}
