package httpapi_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/security/assertion"
	"github.com/waitroom/waitroom/pkg/security/bypass"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/services/api/httpapi"
)

// siteJWKS serves an Ed25519 key set as a site would, and signs with it.
func siteJWKS(t *testing.T) (url string, sign func(jwt.MapClaims) string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	set := `{"keys":[{"kty":"OKP","crv":"Ed25519","alg":"EdDSA","use":"sig","kid":"site-1","x":"` +
		base64.RawURLEncoding.EncodeToString(pub) + `"}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(set))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func(c jwt.MapClaims) string {
		tk := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c)
		tk.Header["kid"] = "site-1"
		raw, err := tk.SignedString(priv)
		require.NoError(t, err)
		return raw
	}
}

func siteClaims(user, item string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"iss": "shop", "aud": assertion.Audience, "sub": user, "itm": item,
		"iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "jti": rand.Text()}
}

// An api that requires assertions refuses a registration without one, takes
// one signed by a key of the site's JWKS (its user proven: the place is keyed
// by the user), and refuses a token signed any other way.
func TestAssertionsRequiredFromTheSitesJWKS(t *testing.T) {
	jwks, sign := siteJWKS(t)
	s := newAPIWith(t, func(c *httpapi.Config) {
		c.Assertion = assertion.Config{Issuer: "shop", JWKSURL: jwks, Required: true, MaxTTL: 10 * time.Minute}
	}, item("tix"))

	a := s.post("/api/v1/items/tix/registrations", map[string]any{"userId": "carol"})
	assert.Equal(t, http.StatusUnauthorized, a.Code)
	assert.Equal(t, "ASSERTION_REQUIRED", a.errCode(t))

	a = s.post("/api/v1/items/tix/registrations", map[string]any{"assertion": sign(siteClaims("carol", "tix"))})
	require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
	var r httpapi.RegisterResponse
	a.decode(t, &r)
	assert.Equal(t, "carol", r.UserID)
	q, err := s.signer.ParseQueue(r.Token)
	require.NoError(t, err)
	assert.True(t, q.Proven())
	assert.Equal(t, "carol", q.PlaceKey())

	// HS256 with the public key's bytes, or no signature: another algorithm
	// than the key set's is never accepted.
	hs, err := jwt.NewWithClaims(jwt.SigningMethodHS256, siteClaims("carol", "tix")).SignedString([]byte("a-secret-anyone-could-pick-of-32-bytes!"))
	require.NoError(t, err)
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, siteClaims("carol", "tix")).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	for _, raw := range []string{hs, none} {
		a = s.post("/api/v1/items/tix/registrations", map[string]any{"assertion": raw})
		assert.Equal(t, http.StatusUnauthorized, a.Code, "%s", a.Body)
		assert.Equal(t, "ASSERTION_INVALID", a.errCode(t))
	}
}

// An api that trusts no assertions says so rather than ignoring one.
func TestAnAssertionWhereNoneIsTrusted(t *testing.T) {
	s := newAPI(t, item("tix"))
	a := s.post("/api/v1/items/tix/registrations", map[string]any{"assertion": "x.y.z"})
	assert.Equal(t, http.StatusConflict, a.Code)
	assert.Equal(t, "ASSERTIONS_DISABLED", a.errCode(t))
}

// The public half of the dev stack's bypass key verifies codes anyone can
// sign: a deployed api refuses it.
func TestConfigRefusesTheDevBypassKey(t *testing.T) {
	cfg, err := config.Defaults[httpapi.Config]()
	require.NoError(t, err)
	cfg.Kafka.Brokers, cfg.TokenKey, cfg.AdmissionKey = []string{"127.0.0.1:9092"}, testKey, admissionKey
	require.NoError(t, cfg.Validate())
	cfg.BypassPublicKey, err = bypass.PublicOf(bypass.DevKey)
	require.NoError(t, err)
	err = cfg.Validate()
	require.ErrorIs(t, err, config.ErrPublishedKey)
	assert.Contains(t, err.Error(), "WR_BYPASS_PUBLIC_KEY")
	cfg.DevKeys = true
	assert.NoError(t, cfg.Validate())
}

// An api whose operator chose ES256 admission tokens: the status answer's
// admission token is ES256, the JWKS publishes its P-256 key, the token
// verifies with it, and verify takes it.
func TestES256AdmissionsOverTheAPI(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	require.NoError(t, err)
	s := newAPIWith(t, func(c *httpapi.Config) {
		c.AdmissionAlg, c.AdmissionKey, c.AdmissionKID = token.ES256, base64.StdEncoding.EncodeToString(der), "e1"
	}, item("tix"))
	r, q := s.register("tix", "ivy")
	s.apply(q)
	s.admit("tix")
	s.ack("tix")
	st := s.status("tix", r.Token)
	require.Equal(t, "ADMITTED", st.Status)

	var set token.JWKS
	s.do(http.MethodGet, "/.well-known/jwks.json", nil).decode(t, &set)
	require.Len(t, set.Keys, 1)
	k := set.Keys[0]
	require.Equal(t, []string{"EC", "P-256", "ES256", "e1"}, []string{k.Kty, k.Crv, k.Alg, k.Kid})
	x, _ := base64.RawURLEncoding.DecodeString(k.X)
	y, _ := base64.RawURLEncoding.DecodeString(k.Y)
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
	require.NoError(t, err)
	parsed, err := jwt.Parse(st.AdmissionToken, func(*jwt.Token) (any, error) { return pub, nil }, jwt.WithValidMethods([]string{"ES256"}))
	require.NoError(t, err)
	assert.Equal(t, "e1", parsed.Header["kid"])
	a := s.post("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "tix"})
	assert.Equal(t, http.StatusOK, a.Code, "%s", a.Body)
}

// A proven registration whose answer was lost is sent again as it was (the
// same assertion and requestId: waitroom.js does so after a network error or
// a 503) and gets its place back, as an unproven one does: the assertion was
// spent by the first try, yet the retry names the same place, so it is no
// second use. The assertion with another requestId, or with none, is.
func TestARetriedProvenRegistrationKeepsItsPlace(t *testing.T) {
	jwks, sign := siteJWKS(t)
	s := newAPIWith(t, func(c *httpapi.Config) {
		c.Assertion = assertion.Config{Issuer: "shop", JWKSURL: jwks, MaxTTL: 10 * time.Minute}
	}, item("tix"))
	const reg = "/api/v1/items/tix/registrations"
	raw := sign(siteClaims("carol", "tix"))
	body := map[string]any{"assertion": raw, "requestId": "r-0123456789abcdef"}
	first := s.post(reg, body)
	require.Equal(t, http.StatusAccepted, first.Code, "%s", first.Body)
	retry := s.post(reg, body)
	require.Equal(t, http.StatusAccepted, retry.Code, "the retry of a lost answer: %s", retry.Body)
	var a, b httpapi.RegisterResponse
	first.decode(t, &a)
	retry.decode(t, &b)
	assert.Equal(t, a.TokenID, b.TokenID, "the same place")

	for _, other := range []map[string]any{{"assertion": raw, "requestId": "r-fedcba9876543210"}, {"assertion": raw}} {
		r := s.post(reg, other)
		assert.Equal(t, http.StatusUnauthorized, r.Code, "%v: %s", other, r.Body)
		assert.Equal(t, "ASSERTION_REUSED", r.errCode(t), "%v", other)
	}
	once := sign(siteClaims("carol", "tix"))
	require.Equal(t, http.StatusAccepted, s.post(reg, map[string]any{"assertion": once}).Code)
	r := s.post(reg, map[string]any{"assertion": once})
	assert.Equal(t, "ASSERTION_REUSED", r.errCode(t), "without a requestId every second use is refused")
}
