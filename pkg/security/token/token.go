// Package token issues and checks waitroom's signed tokens (JWT): the queue
// token a user gets on registration, signed with HMAC-SHA256 or Ed25519.
package token

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/golang-jwt/jwt/v5"
	"github.com/waitroom/waitroom/topics"
)

// Errors Parse returns; HTTP maps both to 401.
var (
	ErrInvalid = errors.New("token invalid")
	ErrExpired = errors.New("token expired")
)

const (
	issuer        = "waitroom"
	audienceQueue = "waitroom-queue"
)

// Algorithms a Signer can use.
const (
	HS256 = "HS256"
	EdDSA = "EdDSA"
	// ES256 (ECDSA P-256) is for admission tokens only, for the sites
	// whose stack cannot verify EdDSA (older .NET, Java, PHP).
	ES256 = "ES256"
)

// Queue is what a queue token says: whose registration it is and where the
// broker put it (partition and offset), which tells a pending registration
// from one that was applied.
type Queue struct {
	TokenID string
	ItemID  string
	UserID  string
	// Holder is what keys the token's place (topics.HolderToken or
	// topics.HolderUser; "" in tokens issued before holders: the userId).
	Holder    string
	Partition int32
	Offset    int64
	IssuedAt  time.Time
	ExpiresAt time.Time
}

type queueClaims struct {
	Item      string `json:"itm"`
	Partition int32  `json:"p"`
	Offset    int64  `json:"o"`
	Holder    string `json:"h,omitempty"`
	jwt.RegisteredClaims
}

// Signer signs and verifies tokens with one key. It is safe for concurrent use.
type Signer struct {
	method    jwt.SigningMethod
	signKey   any
	verifyKey any
	kid       string
	header    string // the encoded JOSE header, the same for every token
	parser    *jwt.Parser
	mac       mac
	now       func() time.Time
	// also are keys that verify (never sign) tokens whose header names
	// their kid: the previous or next key of a rollover (VerifyAlso).
	also []VerifyKey
	// seen, when set, remembers queue tokens that passed ParseQueue
	// (RememberVerified).
	seen *verified
}

// VerifyKey is an Ed25519 public key a Signer accepts besides its own, by kid.
type VerifyKey struct {
	KID string
	Key ed25519.PublicKey
}

// Option changes a Signer built by New.
type Option func(*Signer) error

// VerifyAlso makes an Ed25519 Signer accept tokens signed by keys too (each
// named by its kid, which must differ from the Signer's and from each other),
// and publish them in its JWKS: the two keys of a rollover. The Signer still
// signs with its own key only.
func VerifyAlso(keys ...VerifyKey) Option {
	return func(s *Signer) error {
		if _, ok := s.verifyKey.(ed25519.PublicKey); !ok {
			return errors.New("only Ed25519 keys can be published for verification")
		}
		seen := map[string]bool{s.kid: true}
		for _, k := range keys {
			switch {
			case k.KID == "":
				return errors.New("a verification key needs a kid")
			case seen[k.KID]:
				return fmt.Errorf("kid %q is used twice", k.KID)
			case len(k.Key) != ed25519.PublicKeySize:
				return fmt.Errorf("key %q is %d bytes, want %d", k.KID, len(k.Key), ed25519.PublicKeySize)
			case k.Key.Equal(s.verifyKey):
				return fmt.Errorf("key %q is the signing key itself", k.KID)
			}
			seen[k.KID] = true
		}
		if s.kid == "" && len(keys) > 0 {
			return errors.New("the signing key needs a kid when other keys verify too")
		}
		s.also = append(s.also, keys...)
		return nil
	}
}

// wireQueueClaims is queueClaims as it goes on the wire, with plain numbers:
// signing is on the register hot path, and NumericDate's marshaller is slow.
type wireQueueClaims struct {
	Item      string   `json:"itm"`
	Partition int32    `json:"p"`
	Offset    int64    `json:"o"`
	Holder    string   `json:"h,omitempty"`
	Issuer    string   `json:"iss"`
	Subject   string   `json:"sub"`
	Audience  []string `json:"aud"`
	ExpiresAt int64    `json:"exp"`
	IssuedAt  int64    `json:"iat"`
	ID        string   `json:"jti"`
}

// NewHMAC returns a Signer using HMAC-SHA256; secret must be at least 32 bytes.
func NewHMAC(secret []byte, kid string) (*Signer, error) {
	if len(secret) < 32 {
		return nil, fmt.Errorf("hmac secret is %d bytes, need at least 32", len(secret))
	}
	return newSigner(jwt.SigningMethodHS256, secret, secret, kid), nil
}

// NewEd25519 returns a Signer using Ed25519 (EdDSA); verifiers need only the public key.
func NewEd25519(priv ed25519.PrivateKey, kid string) (*Signer, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("ed25519 private key is %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	return newSigner(jwt.SigningMethodEdDSA, priv, priv.Public(), kid), nil
}

// New builds a Signer from configuration: alg HS256 with key the secret
// (base64 or raw text of at least 32 bytes), or EdDSA with key the base64
// Ed25519 seed (32 bytes).
func New(alg, key, kid string, opts ...Option) (*Signer, error) {
	var (
		s   *Signer
		err error
	)
	switch alg {
	case HS256:
		if b, derr := base64.StdEncoding.DecodeString(key); derr == nil && len(b) >= 32 {
			s, err = NewHMAC(b, kid)
		} else {
			s, err = NewHMAC([]byte(key), kid)
		}
	case EdDSA:
		var priv ed25519.PrivateKey
		if priv, err = Ed25519Seed(key); err == nil {
			s, err = NewEd25519(priv, kid)
		}
	case ES256:
		var priv *ecdsa.PrivateKey
		if priv, err = ES256Key(key); err == nil {
			s, err = NewES256(priv, kid)
		}
	default:
		err = fmt.Errorf("token algorithm %q is not %s, %s or %s", alg, HS256, EdDSA, ES256)
	}
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// NewES256 returns a Signer using ECDSA P-256 (ES256), for admission tokens;
// it issues no queue tokens (IssueQueue refuses).
func NewES256(priv *ecdsa.PrivateKey, kid string) (*Signer, error) {
	if priv == nil || priv.Curve != elliptic.P256() {
		return nil, errors.New("ES256 needs a P-256 private key")
	}
	return newSigner(jwt.SigningMethodES256, priv, &priv.PublicKey, kid), nil
}

// ES256Key decodes a base64 P-256 private key, PKCS #8 or SEC 1 DER (openssl
// genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -outform DER | base64).
func ES256Key(key string) (*ecdsa.PrivateKey, error) {
	der, err := base64.StdEncoding.DecodeString(strings.TrimSpace(key))
	if err != nil {
		return nil, errors.New("ES256 key must be a base64 DER P-256 private key (PKCS #8 or SEC 1)")
	}
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		if ec, ok := k.(*ecdsa.PrivateKey); ok && ec.Curve == elliptic.P256() {
			return ec, nil
		}
		return nil, errors.New("ES256 key is not a P-256 private key")
	}
	ec, err := x509.ParseECPrivateKey(der)
	if err != nil || ec.Curve != elliptic.P256() {
		return nil, errors.New("ES256 key must be a base64 DER P-256 private key (PKCS #8 or SEC 1)")
	}
	return ec, nil
}

// Ed25519Seed decodes a base64 Ed25519 seed (32 bytes) into its private key.
func Ed25519Seed(key string) (ed25519.PrivateKey, error) {
	seed, err := base64.StdEncoding.DecodeString(key)
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("EdDSA key must be a base64 Ed25519 seed of %d bytes", ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// keyFor picks the key that verifies t: a VerifyAlso key when t's header
// names its kid, else the Signer's own (which then checks the signature, so a
// token of an unknown kid fails there).
func (s *Signer) keyFor(t *jwt.Token) (any, error) {
	if kid, _ := t.Header["kid"].(string); kid != "" && kid != s.kid {
		for _, k := range s.also {
			if k.KID == kid {
				return k.Key, nil
			}
		}
	}
	return s.verifyKey, nil
}

func newSigner(m jwt.SigningMethod, sign, verify any, kid string) *Signer {
	s := &Signer{method: m, signKey: sign, verifyKey: verify, kid: kid, mac: newMAC(m.Alg(), sign, verify), now: time.Now}
	h := map[string]string{"alg": m.Alg(), "typ": "JWT"}
	if kid != "" {
		h["kid"] = kid
	}
	hb, _ := json.Marshal(h) // a map of strings always marshals
	s.header = base64.RawURLEncoding.EncodeToString(hb)
	s.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{m.Alg()}),
		jwt.WithIssuer(issuer),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(func() time.Time { return s.now() }),
	)
	return s
}

// WithClock sets the time tokens are issued and checked at (default
// time.Now): a process's own clock, which may be off (config.Clock).
func (s *Signer) WithClock(now func() time.Time) *Signer {
	s.now = now
	return s
}

// Alg names the signing algorithm.
func (s *Signer) Alg() string { return s.method.Alg() }

// IssueQueue signs a queue token for q that is valid for ttl. It builds the
// JWS compact form itself (the header is encoded once per Signer; see
// fast.go); golang-jwt's parser reads it. One allocation: the token.
func (s *Signer) IssueQueue(q Queue, ttl time.Duration) (string, error) {
	b, err := s.AppendQueue(nil, q, ttl)
	if err != nil {
		return "", err
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), nil // b is never written again
}

// AppendQueue is IssueQueue appending the token to dst, for a caller that
// writes it out and needs no string of it (the api's 202); it grows dst at
// most once. The token is ASCII (base64url and dots): it needs no quoting
// in JSON or escaping in a URL path.
func (s *Signer) AppendQueue(dst []byte, q Queue, ttl time.Duration) ([]byte, error) {
	if !s.mac.usable() {
		return dst, fmt.Errorf("%s signs admission tokens only", s.method.Alg())
	}
	return s.appendQueueFast(dst, q, ttl), nil
}

// ParseQueue verifies a queue token's signature, issuer, audience and expiry
// and returns what it says. Any failure is ErrInvalid or ErrExpired.
func (s *Signer) ParseQueue(raw string) (Queue, error) {
	q, _, err := s.ParseQueueSlot(raw)
	return q, err
}

// ParseQueueSlot is ParseQueue that also hands out the token's Slot when
// the Signer remembers it (RememberVerified), nil otherwise: the caller's
// record of exactly this token, found by the same look-up.
func (s *Signer) ParseQueueSlot(raw string) (Queue, *Slot, error) {
	if len(raw) > 4096 {
		return Queue{}, nil, fmt.Errorf("%w: longer than 4096 bytes", ErrInvalid)
	}
	if !s.mac.usable() {
		q, err := s.parseQueueLib(raw)
		return q, nil, err
	}
	if s.seen != nil {
		if e, ok := s.seen.get(raw, s.now()); ok {
			return e.q, &e.slot, nil
		}
	}
	switch q, r := s.parseQueueFast(raw); r {
	case fastOK:
		if s.seen != nil {
			if e := s.seen.put(raw, q); e != nil {
				return q, &e.slot, nil
			}
		}
		return q, nil, nil
	case fastExpired:
		return Queue{}, nil, ErrExpired
	case fastInvalid:
		return Queue{}, nil, fmt.Errorf("%w: bad signature or claims", ErrInvalid)
	}
	q, err := s.parseQueueLib(raw)
	return q, nil, err
}

// parseQueueLib is ParseQueue by golang-jwt's parser: algorithm pinned,
// issuer, expiry required, issued-at, with leeway.
func (s *Signer) parseQueueLib(raw string) (Queue, error) {
	var c queueClaims
	_, err := s.parser.ParseWithClaims(raw, &c, s.keyFor)
	if err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return Queue{}, ErrExpired
		}
		return Queue{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !audienceIs(c.Audience, audienceQueue) {
		return Queue{}, fmt.Errorf("%w: not a queue token", ErrInvalid)
	}
	if c.ID == "" || c.Item == "" || c.Subject == "" || c.Offset < 0 || c.Partition < 0 {
		return Queue{}, fmt.Errorf("%w: missing claims", ErrInvalid)
	}
	q := Queue{
		TokenID: c.ID, ItemID: c.Item, UserID: c.Subject, Holder: c.Holder, Partition: c.Partition, Offset: c.Offset,
		ExpiresAt: c.ExpiresAt.Time, // required by the parser
	}
	if c.IssuedAt != nil { // optional: a signed token without iat used to panic here
		q.IssuedAt = c.IssuedAt.Time
	}
	return q, nil
}

// PlaceKey is the key of q's place in its item's line (topics.PlaceKey).
func (q Queue) PlaceKey() string { return topics.PlaceKey(q.Holder, q.TokenID, q.UserID) }

// Proven reports whether q's userId was proven by a site-signed assertion
// (or comes from a token issued before holders, when every userId keyed its
// place): then another token of the same user may resume that user's place.
func (q Queue) Proven() bool { return q.Holder != topics.HolderToken }

func audienceIs(aud jwt.ClaimStrings, want string) bool {
	return len(aud) == 1 && aud[0] == want
}
