package assertion_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/security/assertion"
)

const secret = "a-site-secret-of-at-least-32-bytes!!"

func TestConfigValidate(t *testing.T) {
	ok := assertion.Config{Issuer: "shop", Secret: secret, MaxTTL: time.Minute}
	require.NoError(t, ok.Validate())
	require.NoError(t, assertion.Config{}.Validate(), "off")
	for name, c := range map[string]assertion.Config{
		"a key without issuer":     {Secret: secret, MaxTTL: time.Minute},
		"required without issuer":  {Required: true, MaxTTL: time.Minute},
		"no key":                   {Issuer: "shop", MaxTTL: time.Minute},
		"two keys":                 {Issuer: "shop", Secret: secret, JWKSURL: "https://shop/jwks", MaxTTL: time.Minute},
		"short secret":             {Issuer: "shop", Secret: "short", MaxTTL: time.Minute},
		"bad public key":           {Issuer: "shop", PublicKey: "AAAA", MaxTTL: time.Minute},
		"plain http JWKS":          {Issuer: "shop", JWKSURL: "http://shop.example/jwks", MaxTTL: time.Minute},
		"no lifetime":              {Issuer: "shop", Secret: secret},
		"a lifetime over the hour": {Issuer: "shop", Secret: secret, MaxTTL: 2 * time.Hour},
	} {
		assert.Error(t, c.Validate(), name)
	}
	assert.NoError(t, assertion.Config{Issuer: "shop", JWKSURL: "http://127.0.0.1:9/jwks", MaxTTL: time.Minute}.Validate(), "loopback http")
}

func TestVerify(t *testing.T) {
	v, err := assertion.New(context.Background(), assertion.Config{Issuer: "shop", Secret: secret, MaxTTL: 5 * time.Minute})
	require.NoError(t, err)
	now := time.Now()
	sign := func(change func(jwt.MapClaims)) string {
		c := jwt.MapClaims{"iss": "shop", "aud": assertion.Audience, "sub": "dana", "itm": "tix",
			"iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "jti": "j1"}
		if change != nil {
			change(c)
		}
		raw, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
		require.NoError(t, err)
		return raw
	}
	c, err := v.Verify(sign(nil), "tix")
	require.NoError(t, err)
	assert.Equal(t, assertion.Claims{UserID: "dana", ItemID: "tix", ID: "j1", ExpiresAt: time.Unix(now.Add(time.Minute).Unix(), 0)}, c)
	assert.True(t, strings.HasPrefix(v.SpentKey(c), "wr:assertion:"))

	_, err = v.Verify(sign(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Minute).Unix() }), "tix")
	assert.ErrorIs(t, err, assertion.ErrExpired)
	for name, change := range map[string]func(jwt.MapClaims){
		"other item":     func(c jwt.MapClaims) { c["itm"] = "other" },
		"other issuer":   func(c jwt.MapClaims) { c["iss"] = "evil" },
		"other audience": func(c jwt.MapClaims) { c["aud"] = "waitroom-queue" },
		"no jti":         func(c jwt.MapClaims) { delete(c, "jti") },
		"no iat":         func(c jwt.MapClaims) { delete(c, "iat") },
		"bad user":       func(c jwt.MapClaims) { c["sub"] = "a b" },
		"too long":       func(c jwt.MapClaims) { c["exp"] = now.Add(time.Hour).Unix() },
	} {
		_, err := v.Verify(sign(change), "tix")
		assert.ErrorIs(t, err, assertion.ErrInvalid, name)
	}
	_, err = v.Verify(strings.Repeat("a", assertion.MaxBytes+1), "tix")
	assert.ErrorIs(t, err, assertion.ErrInvalid)
}
