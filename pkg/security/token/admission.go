package token

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/waitroom/waitroom/topics"
)

const audienceAdmission = "waitroom-admission"

// Admission is what an admission token says: this user of this item was let
// through until ExpiresAt. Downstream services check it offline (JWKS) or with
// the verify API, which also checks the admission is still live.
type Admission struct {
	TokenID string
	ItemID  string
	UserID  string
	// Holder is what keyed the admitted place (Queue.Holder): HolderUser
	// when a site-signed assertion proved UserID.
	Holder    string
	ExpiresAt time.Time
}

// PlaceKey is the key of a's place in its item's line (topics.PlaceKey).
func (a Admission) PlaceKey() string { return topics.PlaceKey(a.Holder, a.TokenID, a.UserID) }

type admissionClaims struct {
	Item   string `json:"itm"`
	Holder string `json:"h,omitempty"`
	jwt.RegisteredClaims
}

// IssueAdmission signs an admission token valid until a.ExpiresAt.
func (s *Signer) IssueAdmission(a Admission) (string, error) {
	c := admissionClaims{Item: a.ItemID, Holder: a.Holder, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: issuer, Subject: a.UserID, Audience: jwt.ClaimStrings{audienceAdmission}, ID: a.TokenID,
		IssuedAt: jwt.NewNumericDate(s.now()), ExpiresAt: jwt.NewNumericDate(a.ExpiresAt),
	}}
	t := jwt.NewWithClaims(s.method, c)
	if s.kid != "" {
		t.Header["kid"] = s.kid
	}
	out, err := t.SignedString(s.signKey)
	if err != nil {
		return "", fmt.Errorf("sign admission token: %w", err)
	}
	return out, nil
}

// ParseAdmission verifies an admission token and returns what it says; any
// failure is ErrInvalid or ErrExpired. A queue token is not an admission token.
func (s *Signer) ParseAdmission(raw string) (Admission, error) {
	if len(raw) > 4096 {
		return Admission{}, fmt.Errorf("%w: longer than 4096 bytes", ErrInvalid)
	}
	var c admissionClaims
	_, err := s.parser.ParseWithClaims(raw, &c, s.keyFor)
	if err != nil {
		if errors.Is(err, jwt.ErrTokenExpired) {
			return Admission{}, ErrExpired
		}
		return Admission{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !audienceIs(c.Audience, audienceAdmission) {
		return Admission{}, fmt.Errorf("%w: not an admission token", ErrInvalid)
	}
	if c.ID == "" || c.Item == "" || c.Subject == "" {
		return Admission{}, fmt.Errorf("%w: missing claims", ErrInvalid)
	}
	return Admission{TokenID: c.ID, ItemID: c.Item, UserID: c.Subject, Holder: c.Holder, ExpiresAt: c.ExpiresAt.Time}, nil
}

// JWK is one public key in a JSON Web Key Set (RFC 8037 for Ed25519).
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y,omitempty"` // EC keys
	Kid string `json:"kid,omitempty"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

// JWKS is a JSON Web Key Set.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// PublicJWKS returns the key set that verifies this Signer's tokens: its own
// key first, then the VerifyAlso keys of a rollover. ok is false for HMAC,
// whose key is a secret.
func (s *Signer) PublicJWKS() (JWKS, bool) {
	if ec, ok := s.verifyKey.(*ecdsa.PublicKey); ok {
		b, err := ec.Bytes() // 0x04 || X || Y, 32 bytes each for P-256
		if err != nil || len(b) != 65 {
			return JWKS{}, false
		}
		return JWKS{Keys: []JWK{{Kty: "EC", Crv: "P-256", X: base64.RawURLEncoding.EncodeToString(b[1:33]),
			Y: base64.RawURLEncoding.EncodeToString(b[33:]), Kid: s.kid, Alg: ES256, Use: "sig"}}}, true
	}
	pub, ok := s.verifyKey.(ed25519.PublicKey)
	if !ok {
		return JWKS{}, false
	}
	jwk := func(kid string, k ed25519.PublicKey) JWK {
		return JWK{Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(k), Kid: kid, Alg: EdDSA, Use: "sig"}
	}
	set := JWKS{Keys: []JWK{jwk(s.kid, pub)}}
	for _, k := range s.also {
		set.Keys = append(set.Keys, jwk(k.KID, k.Key))
	}
	return set, true
}
