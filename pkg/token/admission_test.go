package token

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAdmissionTokens(t *testing.T) {
	s := signers(t)[EdDSA]
	exp := time.Now().Add(5 * time.Minute).Truncate(time.Second)
	raw, err := s.IssueAdmission(Admission{TokenID: "T1", ItemID: "i", UserID: "u", ExpiresAt: exp})
	require.NoError(t, err)
	a, err := s.ParseAdmission(raw)
	require.NoError(t, err)
	assert.Equal(t, Admission{TokenID: "T1", ItemID: "i", UserID: "u", ExpiresAt: exp}, Admission{a.TokenID, a.ItemID, a.UserID, a.ExpiresAt.Local()})

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
