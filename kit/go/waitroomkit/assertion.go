package waitroomkit

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The claims of a user assertion: a JWT the protected site signs to tell
// waitroom who the user registering is.
const (
	// AssertionAudience is the aud of every assertion.
	AssertionAudience = "waitroom-assertion"
	// MaxAssertionTTL is the longest an assertion may live (exp - iat).
	MaxAssertionTTL = 10 * time.Minute
	// MinAssertionSecret is the shortest HS256 secret accepted, in bytes.
	MinAssertionSecret = 32
	// AssertionParam is the query parameter of the waiting page that carries
	// an assertion to the page, which sends it as the register request's
	// "assertion".
	AssertionParam = "assertion"
)

// Asserter signs user assertions for one site issuer: HS256 with a shared
// secret or EdDSA with an Ed25519 private key (waitroom verifies with the
// public key or the site's JWKS). It is safe for concurrent use.
type Asserter struct {
	issuer string
	method jwt.SigningMethod
	key    any
	kid    string
	ttl    time.Duration
	now    func() time.Time
}

// AsserterOption configures an Asserter.
type AsserterOption func(*Asserter)

// WithAssertionKID puts kid in the header of every assertion (for a
// waitroom that knows several of the site's keys).
func WithAssertionKID(kid string) AsserterOption { return func(a *Asserter) { a.kid = kid } }

// WithAssertionTTL sets how long an assertion lives (default 2 min, at
// most MaxAssertionTTL): long enough for the browser to reach the waiting
// page and register.
func WithAssertionTTL(d time.Duration) AsserterOption { return func(a *Asserter) { a.ttl = d } }

// WithAssertionClock sets the clock iat and exp are taken from (tests).
func WithAssertionClock(now func() time.Time) AsserterOption {
	return func(a *Asserter) { a.now = now }
}

// NewAsserter returns an Asserter for issuer (the site's issuer string, as
// configured on waitroom too) signing with key: a []byte secret of at least
// MinAssertionSecret bytes (HS256) or an ed25519.PrivateKey (EdDSA).
func NewAsserter(issuer string, key any, opts ...AsserterOption) (*Asserter, error) {
	a := &Asserter{issuer: issuer, ttl: 2 * time.Minute, now: time.Now}
	switch k := key.(type) {
	case []byte:
		if len(k) < MinAssertionSecret {
			return nil, fmt.Errorf("waitroomkit: an HS256 assertion secret needs at least %d bytes, got %d", MinAssertionSecret, len(k))
		}
		a.method, a.key = jwt.SigningMethodHS256, append([]byte(nil), k...)
	case ed25519.PrivateKey:
		if len(k) != ed25519.PrivateKeySize {
			return nil, errors.New("waitroomkit: the Ed25519 assertion key is not a private key")
		}
		a.method, a.key = jwt.SigningMethodEdDSA, k
	default:
		return nil, fmt.Errorf("waitroomkit: an assertion key is a []byte secret or an ed25519.PrivateKey, not %T", key)
	}
	for _, o := range opts {
		o(a)
	}
	switch {
	case issuer == "":
		return nil, errors.New("waitroomkit: an assertion needs an issuer")
	case a.ttl <= 0 || a.ttl > MaxAssertionTTL:
		return nil, fmt.Errorf("waitroomkit: the assertion TTL %s is not in (0, %s]", a.ttl, MaxAssertionTTL)
	}
	return a, nil
}

// Assert signs an assertion that userID is the user registering for itemID,
// valid for the Asserter's TTL and once (its jti is 128 random bits).
// userID and itemID must be 1-64 characters of [A-Za-z0-9._:-].
func (a *Asserter) Assert(userID, itemID string) (string, error) {
	if !validID(userID) {
		return "", fmt.Errorf("waitroomkit: assert: userId %q is not 1-%d characters of [A-Za-z0-9._:-]", userID, maxIDLen)
	}
	if !validID(itemID) {
		return "", fmt.Errorf("waitroomkit: assert: itemId %q is not 1-%d characters of [A-Za-z0-9._:-]", itemID, maxIDLen)
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", fmt.Errorf("waitroomkit: assert: read a random jti: %w", err)
	}
	now := a.now()
	t := jwt.NewWithClaims(a.method, jwt.MapClaims{
		"iss": a.issuer,
		"aud": AssertionAudience,
		"sub": userID,
		"itm": itemID,
		"iat": now.Unix(),
		"exp": now.Add(a.ttl).Unix(),
		"jti": base64.RawURLEncoding.EncodeToString(id[:]),
	})
	if a.kid != "" {
		t.Header["kid"] = a.kid
	}
	s, err := t.SignedString(a.key)
	if err != nil {
		return "", fmt.Errorf("waitroomkit: assert: sign: %w", err)
	}
	return s, nil
}

// WithAssertions makes the redirect to the waiting page carry an assertion
// (signed by as) for the user userOf names, when the site knows who the
// request's user is (ok); an anonymous request gets the plain waiting page.
func WithAssertions(as *Asserter, userOf func(*http.Request) (userID string, ok bool)) Option {
	return func(k *Kit) { k.asserter, k.userOf = as, userOf }
}

// RedirectURL is where Protect sends a refused request: the item's waiting
// page, with ?assertion= for the user when WithAssertions names one. A user
// id that cannot be asserted (not 1-64 characters of [A-Za-z0-9._:-])
// gets the plain page, as an anonymous user would.
func (k *Kit) RedirectURL(r *http.Request, item string) string {
	u := k.WaitURL(item)
	if k.asserter == nil {
		return u
	}
	user, ok := k.userOf(r)
	if !ok {
		return u
	}
	jwt, err := k.asserter.Assert(user, item)
	if err != nil {
		return u
	}
	return u + "?" + AssertionParam + "=" + url.QueryEscape(jwt)
}

const maxIDLen = 64

// validID is waitroom's rule for ids: 1-64 characters of [A-Za-z0-9._:-]
// (topics.ValidID, restated: the kit depends on nothing of waitroom; the dev
// stack's TestTheKitAssertsOnlyWhatTheRoomAccepts holds the two together).
func validID(s string) bool {
	if len(s) == 0 || len(s) > maxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}
