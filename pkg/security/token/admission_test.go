package token

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAdmissionTokens(t *testing.T) {
	s := signers(t)[EdDSA]
	exp := time.Now().Add(5 * time.Minute).Truncate(time.Second)
	raw, err := s.IssueAdmission(Admission{TokenID: "T1", ItemID: "i", UserID: "u", Holder: "user", ExpiresAt: exp})
	require.NoError(t, err)
	a, err := s.ParseAdmission(raw)
	require.NoError(t, err)
	a.ExpiresAt = a.ExpiresAt.Local()
	assert.Equal(t, Admission{TokenID: "T1", ItemID: "i", UserID: "u", Holder: "user", ExpiresAt: exp}, a)
	assert.Equal(t, "u", a.PlaceKey())

	// A queue token is not an admission token, and the other way round.
	q, err := s.IssueQueue(Queue{TokenID: "T1", ItemID: "i", UserID: "u"}, time.Hour)
	require.NoError(t, err)
	_, err = s.ParseAdmission(q)
	assert.True(t, errors.Is(err, ErrInvalid))
	_, err = s.ParseQueue(raw)
	assert.True(t, errors.Is(err, ErrInvalid))

	old, err := s.IssueAdmission(Admission{TokenID: "T1", ItemID: "i", UserID: "u", ExpiresAt: time.Now().Add(-time.Minute)})
	require.NoError(t, err)
	_, err = s.ParseAdmission(old)
	assert.ErrorIs(t, err, ErrExpired)
}

// A downstream service verifies offline with nothing but the published JWKS.
func TestJWKSVerifiesOffline(t *testing.T) {
	s := signers(t)[EdDSA]
	set, ok := s.PublicJWKS()
	require.True(t, ok)
	require.Len(t, set.Keys, 1)
	k := set.Keys[0]
	assert.Equal(t, "OKP", k.Kty)
	assert.Equal(t, "Ed25519", k.Crv)
	x, err := base64.RawURLEncoding.DecodeString(k.X)
	require.NoError(t, err)
	raw, err := s.IssueAdmission(Admission{TokenID: "T", ItemID: "i", UserID: "u", ExpiresAt: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	tok, err := jwt.Parse(raw, func(*jwt.Token) (any, error) { return ed25519.PublicKey(x), nil }, jwt.WithValidMethods([]string{"EdDSA"}))
	require.NoError(t, err)
	assert.True(t, tok.Valid)
	_, ok = signers(t)[HS256].PublicJWKS()
	assert.False(t, ok, "an HMAC key is never published")
}

// A rollover: the new key signs, the old one still verifies the tokens it
// signed (they live until their session ends), and both are in the JWKS. A
// token naming a kid nobody publishes, or signed by another key under a
// published kid, is refused.
func TestRolloverVerifiesBothKeys(t *testing.T) {
	seed := func(b byte) string { return base64.StdEncoding.EncodeToString(make32(b)) }
	oldS, err := New(EdDSA, seed(1), "a1")
	require.NoError(t, err)
	oldPriv, err := Ed25519Seed(seed(1))
	require.NoError(t, err)
	newS, err := New(EdDSA, seed(2), "a2", VerifyAlso(VerifyKey{KID: "a1", Key: oldPriv.Public().(ed25519.PublicKey)}))
	require.NoError(t, err)

	a := Admission{TokenID: "T", ItemID: "i", UserID: "u", ExpiresAt: time.Now().Add(time.Minute)}
	byOld, err := oldS.IssueAdmission(a)
	require.NoError(t, err)
	byNew, err := newS.IssueAdmission(a)
	require.NoError(t, err)
	for name, raw := range map[string]string{"old key": byOld, "new key": byNew} {
		got, err := newS.ParseAdmission(raw)
		require.NoError(t, err, name)
		assert.Equal(t, "T", got.TokenID, name)
	}
	_, err = oldS.ParseAdmission(byNew)
	assert.ErrorIs(t, err, ErrInvalid, "a signer without the new key refuses its tokens")

	set, ok := newS.PublicJWKS()
	require.True(t, ok)
	require.Len(t, set.Keys, 2)
	assert.Equal(t, []string{"a2", "a1"}, []string{set.Keys[0].Kid, set.Keys[1].Kid}, "the signing key first")

	other, err := New(EdDSA, seed(3), "a1") // another key under a published kid
	require.NoError(t, err)
	forged, err := other.IssueAdmission(a)
	require.NoError(t, err)
	_, err = newS.ParseAdmission(forged)
	assert.ErrorIs(t, err, ErrInvalid)
	stranger, err := New(EdDSA, seed(3), "zz")
	require.NoError(t, err)
	forged, err = stranger.IssueAdmission(a)
	require.NoError(t, err)
	_, err = newS.ParseAdmission(forged)
	assert.ErrorIs(t, err, ErrInvalid)

	pub2 := func(b byte) ed25519.PublicKey { p, _ := Ed25519Seed(seed(b)); return p.Public().(ed25519.PublicKey) }
	for name, keys := range map[string][]VerifyKey{
		"no kid":          {{KID: "", Key: pub2(1)}},
		"the signer's id": {{KID: "a2", Key: pub2(1)}},
		"twice":           {{KID: "a1", Key: pub2(1)}, {KID: "a1", Key: pub2(3)}},
		"the signing key": {{KID: "a1", Key: pub2(2)}},
		"short key":       {{KID: "a1", Key: pub2(1)[:8]}},
	} {
		_, err := New(EdDSA, seed(2), "a2", VerifyAlso(keys...))
		assert.Error(t, err, name)
	}
	_, err = New(HS256, "0123456789abcdef0123456789abcdef", "k1", VerifyAlso(VerifyKey{KID: "a1", Key: pub2(1)}))
	assert.Error(t, err, "HMAC keys are never published")
}

func make32(b byte) []byte {
	out := make([]byte, 32)
	for i := range out {
		out[i] = b
	}
	return out
}

// ES256 admission tokens, for sites that cannot verify EdDSA: they round-trip,
// the JWKS publishes the P-256 key, and the signer issues no queue tokens.
func TestES256Admissions(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	require.NoError(t, err)
	s, err := New(ES256, base64.StdEncoding.EncodeToString(der), "e1")
	require.NoError(t, err)
	exp := time.Now().Add(time.Minute).Truncate(time.Second)
	raw, err := s.IssueAdmission(Admission{TokenID: "T", ItemID: "i", UserID: "u", ExpiresAt: exp})
	require.NoError(t, err)
	a, err := s.ParseAdmission(raw)
	require.NoError(t, err)
	assert.Equal(t, "T", a.TokenID)

	set, ok := s.PublicJWKS()
	require.True(t, ok)
	require.Len(t, set.Keys, 1)
	k := set.Keys[0]
	assert.Equal(t, []string{"EC", "P-256", "ES256", "e1"}, []string{k.Kty, k.Crv, k.Alg, k.Kid})
	x, _ := base64.RawURLEncoding.DecodeString(k.X)
	y, _ := base64.RawURLEncoding.DecodeString(k.Y)
	pub := &ecdsa.PublicKey{Curve: elliptic.P256(), X: new(big.Int).SetBytes(x), Y: new(big.Int).SetBytes(y)}
	_, err = jwt.Parse(raw, func(*jwt.Token) (any, error) { return pub, nil }, jwt.WithValidMethods([]string{"ES256"}))
	assert.NoError(t, err, "the published key verifies the token")

	_, err = s.IssueQueue(Queue{TokenID: "t", ItemID: "i", UserID: "u"}, time.Minute)
	assert.Error(t, err, "ES256 is for admission tokens only")
	sec1, err := x509.MarshalECPrivateKey(priv)
	require.NoError(t, err)
	_, err = ES256Key(base64.StdEncoding.EncodeToString(sec1))
	assert.NoError(t, err, "SEC 1 too")
	_, err = ES256Key("not a key")
	assert.Error(t, err)
}
