// Package token issues and checks waitroom's signed tokens (JWT): the queue
// token a user gets on registration, signed with HMAC-SHA256 or Ed25519.
package token

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
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
)

// Queue is what a queue token says: whose registration it is and where the
// broker put it (partition and offset), which tells a pending registration
// from one that was applied.
type Queue struct {
	TokenID   string
	ItemID    string
	UserID    string
	Partition int32
	Offset    int64
	IssuedAt  time.Time
	ExpiresAt time.Time
}

type queueClaims struct {
	Item      string `json:"itm"`
	Partition int32  `json:"p"`
	Offset    int64  `json:"o"`
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
}

// wireQueueClaims is queueClaims as it goes on the wire, with plain numbers:
// signing is on the register hot path, and NumericDate's marshaller is slow.
type wireQueueClaims struct {
	Item      string   `json:"itm"`
	Partition int32    `json:"p"`
	Offset    int64    `json:"o"`
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
func New(alg, key, kid string) (*Signer, error) {
	switch alg {
	case HS256:
		if b, err := base64.StdEncoding.DecodeString(key); err == nil && len(b) >= 32 {
			return NewHMAC(b, kid)
		}
		return NewHMAC([]byte(key), kid)
	case EdDSA:
		seed, err := base64.StdEncoding.DecodeString(key)
		if err != nil || len(seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("EdDSA key must be a base64 Ed25519 seed of %d bytes", ed25519.SeedSize)
		}
		return NewEd25519(ed25519.NewKeyFromSeed(seed), kid)
	default:
		return nil, fmt.Errorf("token algorithm %q is not %s or %s", alg, HS256, EdDSA)
	}
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

// Alg names the signing algorithm.
func (s *Signer) Alg() string { return s.method.Alg() }

// IssueQueue signs a queue token for q that is valid for ttl. It builds the
// JWS compact form itself (the header is encoded once per Signer; see
// fast.go); golang-jwt's parser reads it.
func (s *Signer) IssueQueue(q Queue, ttl time.Duration) (string, error) {
	return s.issueQueueFast(q, ttl), nil
}

// ParseQueue verifies a queue token's signature, issuer, audience and expiry
// and returns what it says. Any failure is ErrInvalid or ErrExpired.
func (s *Signer) ParseQueue(raw string) (Queue, error) {
	if len(raw) > 4096 {
		return Queue{}, fmt.Errorf("%w: longer than 4096 bytes", ErrInvalid)
	}
	switch q, r := s.parseQueueFast(raw); r {
	case fastOK:
		return q, nil
	case fastExpired:
		return Queue{}, ErrExpired
	case fastInvalid:
		return Queue{}, fmt.Errorf("%w: bad signature or claims", ErrInvalid)
	}
	return s.parseQueueLib(raw)
}

// parseQueueLib is ParseQueue by golang-jwt's parser: algorithm pinned,
// issuer, expiry required, issued-at, with leeway.
func (s *Signer) parseQueueLib(raw string) (Queue, error) {
	var c queueClaims
	_, err := s.parser.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return s.verifyKey, nil })
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
		TokenID: c.ID, ItemID: c.Item, UserID: c.Subject, Partition: c.Partition, Offset: c.Offset,
		ExpiresAt: c.ExpiresAt.Time, // required by the parser
	}
	if c.IssuedAt != nil { // optional: a signed token without iat used to panic here
		q.IssuedAt = c.IssuedAt.Time
	}
	return q, nil
}

func audienceIs(aud jwt.ClaimStrings, want string) bool {
	return len(aud) == 1 && aud[0] == want
}
