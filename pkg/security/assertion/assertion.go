// Package assertion verifies user assertions: short-lived JWTs a protected
// site signs to tell the room who its user is, so that a place may be keyed
// by a userId nobody else can type.
package assertion

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/waitroom/waitroom/topics"
)

// Audience is the aud claim every assertion carries: a token the site signs
// for anything else is never an assertion.
const Audience = "waitroom-assertion"

// MaxBytes is the longest assertion read.
const MaxBytes = 4096

// Errors Verify returns; HTTP answers each with 401 and its own code.
var (
	ErrInvalid = errors.New("assertion invalid")
	ErrExpired = errors.New("assertion expired")
)

// Config says whose assertions the room trusts. Setting WR_ASSERTION_ISSUER
// turns assertions on; exactly one of the three keys must then be set.
type Config struct {
	// Issuer is the iss claim the site signs with.
	Issuer string `env:"WR_ASSERTION_ISSUER"`
	// Secret verifies HS256 assertions (at least 32 bytes, raw or base64):
	// signed with its base64 decoding or with its text, either passes.
	Secret string `env:"WR_ASSERTION_SECRET" secret:"true"`
	// PublicKey verifies EdDSA assertions: a base64 Ed25519 public key.
	PublicKey string `env:"WR_ASSERTION_PUBLIC_KEY"`
	// JWKSURL is the site's key set (EdDSA, ES256 or RS256 keys, by kid),
	// fetched at start and refreshed in the background.
	JWKSURL string `env:"WR_ASSERTION_JWKS_URL"`
	// Required refuses registrations without an assertion (401), for every
	// item of this api.
	Required bool `env:"WR_ASSERTION_REQUIRED" envDefault:"false"`
	// MaxTTL bounds exp - iat: a long-lived assertion is a password.
	MaxTTL time.Duration `env:"WR_ASSERTION_MAX_TTL" envDefault:"10m"`
}

// Enabled reports whether assertions are configured.
func (c Config) Enabled() bool { return c.Issuer != "" }

// Validate checks the settings.
func (c Config) Validate() error {
	keys := 0
	for _, k := range []string{c.Secret, c.PublicKey, c.JWKSURL} {
		if k != "" {
			keys++
		}
	}
	switch {
	case !c.Enabled() && (keys > 0 || c.Required):
		return errors.New("WR_ASSERTION_ISSUER is not set, but an assertion key or WR_ASSERTION_REQUIRED is")
	case !c.Enabled():
		return nil
	case keys != 1:
		return errors.New("with WR_ASSERTION_ISSUER set exactly one of WR_ASSERTION_SECRET, WR_ASSERTION_PUBLIC_KEY, WR_ASSERTION_JWKS_URL must be")
	case c.MaxTTL <= 0 || c.MaxTTL > time.Hour:
		return fmt.Errorf("WR_ASSERTION_MAX_TTL must be in (0, 1h], not %s", c.MaxTTL)
	case c.JWKSURL != "" && !strings.HasPrefix(c.JWKSURL, "https://") && !loopbackHTTP(c.JWKSURL):
		return fmt.Errorf("WR_ASSERTION_JWKS_URL must be https (plain http only on loopback), not %q", c.JWKSURL)
	}
	if c.Secret != "" {
		if _, err := secretsOf(c.Secret); err != nil {
			return fmt.Errorf("WR_ASSERTION_SECRET: %w", err)
		}
	}
	if c.PublicKey != "" {
		if _, err := publicKeyOf(c.PublicKey); err != nil {
			return fmt.Errorf("WR_ASSERTION_PUBLIC_KEY: %w", err)
		}
	}
	return nil
}

func loopbackHTTP(u string) bool {
	for _, p := range []string{"http://127.", "http://localhost:", "http://localhost/", "http://[::1]"} {
		if strings.HasPrefix(u, p) {
			return true
		}
	}
	return false
}

// secretsOf is the HS256 keys of the secret s: its base64 decoding when it
// is one of at least 32 bytes, and s itself when it is at least 32 bytes
// long. Both are taken: a hex secret (openssl rand -hex 32) or a base64 one
// is valid base64, yet a site may sign with its text, as the kit's example
// does with the string it shares with the room (services/dev's
// TestTheRoomTakesTheKitsAssertionsWithTheSameSecret).
func secretsOf(s string) ([][]byte, error) {
	var keys [][]byte
	if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) >= 32 {
		keys = append(keys, b)
	}
	if len(s) >= 32 {
		keys = append(keys, []byte(s))
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("the secret is %d bytes, need at least 32", len(s))
	}
	return keys, nil
}

func publicKeyOf(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("want a base64 Ed25519 public key of %d bytes", ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// Claims is what a verified assertion says: the site vouches that its user
// UserID is the one registering for ItemID. ID (jti) is unique per assertion.
type Claims struct {
	UserID    string
	ItemID    string
	ID        string
	ExpiresAt time.Time
}

// Verifier checks assertions against one site's key. It is safe for
// concurrent use.
type Verifier struct {
	cfg    Config
	parser *jwt.Parser
	key    jwt.Keyfunc
}

type claims struct {
	Item string `json:"itm"`
	jwt.RegisteredClaims
}

// New builds the Verifier of cfg (nil when assertions are off). With a JWKS
// URL it fetches the key set once and refreshes it in the background until
// ctx ends.
func New(ctx context.Context, cfg Config) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, nil
	}
	v := &Verifier{cfg: cfg}
	methods := []string{}
	switch {
	case cfg.Secret != "":
		secrets, _ := secretsOf(cfg.Secret)
		set := jwt.VerificationKeySet{}
		for _, k := range secrets {
			set.Keys = append(set.Keys, k)
		}
		v.key, methods = func(*jwt.Token) (any, error) { return set, nil }, []string{"HS256"}
	case cfg.PublicKey != "":
		pub, _ := publicKeyOf(cfg.PublicKey)
		v.key, methods = func(*jwt.Token) (any, error) { return pub, nil }, []string{"EdDSA"}
	default:
		kf, err := keyfunc.NewDefaultCtx(ctx, []string{cfg.JWKSURL})
		if err != nil {
			return nil, fmt.Errorf("load the assertion key set %s: %w", cfg.JWKSURL, err)
		}
		v.key, methods = kf.Keyfunc, []string{"EdDSA", "ES256", "RS256"}
	}
	v.parser = jwt.NewParser(jwt.WithValidMethods(methods), jwt.WithIssuer(cfg.Issuer), jwt.WithAudience(Audience),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(5*time.Second))
	return v, nil
}

// Required reports whether a registration needs an assertion.
func (v *Verifier) Required() bool { return v != nil && v.cfg.Required }

// Verify checks raw as an assertion for item: signature, issuer, audience,
// expiry, a lifetime within MaxTTL, the item, a valid userId and a jti. It
// does not remember the jti: the caller marks it used (single use).
func (v *Verifier) Verify(raw, item string) (Claims, error) {
	if len(raw) > MaxBytes {
		return Claims{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxBytes)
	}
	var c claims
	if _, err := v.parser.ParseWithClaims(raw, &c, v.key); err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return Claims{}, ErrExpired
		}
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	switch {
	case c.IssuedAt == nil:
		return Claims{}, fmt.Errorf("%w: no iat", ErrInvalid)
	case c.ExpiresAt.Sub(c.IssuedAt.Time) > v.cfg.MaxTTL:
		return Claims{}, fmt.Errorf("%w: lives %s, longer than %s", ErrInvalid, c.ExpiresAt.Sub(c.IssuedAt.Time), v.cfg.MaxTTL)
	case c.Item != item:
		return Claims{}, fmt.Errorf("%w: for item %q, not %q", ErrInvalid, c.Item, item)
	case !topics.ValidID(c.Subject):
		return Claims{}, fmt.Errorf("%w: sub (the userId) must be %s", ErrInvalid, topics.IDRule)
	case c.ID == "" || len(c.ID) > 128:
		return Claims{}, fmt.Errorf("%w: jti must be 1-128 characters", ErrInvalid)
	}
	return Claims{UserID: c.Subject, ItemID: c.Item, ID: c.ID, ExpiresAt: c.ExpiresAt.Time}, nil
}

// SpentKey is the key under which an assertion's single use is remembered
// until it expires: one per issuer and jti.
func (v *Verifier) SpentKey(c Claims) string {
	sum := sha256.Sum256([]byte(v.cfg.Issuer + "\x00" + c.ID))
	return "wr:assertion:" + hex.EncodeToString(sum[:])
}
