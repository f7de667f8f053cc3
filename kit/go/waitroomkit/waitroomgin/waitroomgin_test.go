package waitroomgin

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	"github.com/waitroom/waitroom/kit/go/waitroomkit"
)

// gin routes: a token for the item lets the handler run with the admission;
// none is redirected to the waiting page and the handler never runs.
func TestProtectGin(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a1","alg":"EdDSA","use":"sig","x":"`+
			base64.RawURLEncoding.EncodeToString(pub)+`"}]}`)
	}))
	t.Cleanup(jwks.Close)
	kit, err := waitroomkit.New(jwks.URL, waitroomkit.WithWaitURL(""))
	if err != nil {
		t.Fatal(err)
	}
	gin.SetMode(gin.TestMode)
	r := gin.New()
	ran := 0
	r.GET("/shop/:itemId", Protect(kit, "itemId"), func(c *gin.Context) {
		ran++
		a, _ := Admission(c)
		c.String(http.StatusOK, "hi "+a.UserID)
	})
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": waitroomkit.Issuer, "aud": []string{waitroomkit.Audience},
		"sub": "bob", "jti": "T", "itm": "gig", "iat": time.Now().Unix(), "exp": time.Now().Add(time.Minute).Unix()})
	tok.Header["kid"] = "a1"
	raw, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}

	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/shop/gig", nil)
	req.Header.Set("Authorization", "Bearer "+raw)
	r.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Body.String() != "hi bob" {
		t.Fatalf("with a token: %d %q", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/shop/gig", nil))
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/items/gig/wait" {
		t.Fatalf("without: %d %s", rec.Code, rec.Header().Get("Location"))
	}
	rec = httptest.NewRecorder()
	req = httptest.NewRequest(http.MethodGet, "/shop/other", nil)
	req.Header.Set("Authorization", "Bearer "+raw)
	r.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/items/other/wait" {
		t.Fatalf("another item's token: %d %s", rec.Code, rec.Header().Get("Location"))
	}
	if ran != 1 {
		t.Fatalf("the handler ran %d times, want 1", ran)
	}
}

// With assertions, gin's redirect to the waiting page carries one for the
// user the site knows.
func TestProtectGinCarriesAssertion(t *testing.T) {
	secret := []byte(strings.Repeat("k", 32))
	as, err := waitroomkit.NewAsserter("shop.example", secret)
	if err != nil {
		t.Fatal(err)
	}
	kit, err := waitroomkit.New("https://queue.example", waitroomkit.WithAssertions(as, func(r *http.Request) (string, bool) {
		return "carol", true
	}))
	if err != nil {
		t.Fatal(err)
	}
	gin.SetMode(gin.TestMode)
	r := gin.New()
	r.GET("/shop/:itemId", Protect(kit, "itemId"), func(c *gin.Context) { t.Error("the handler ran without a token") })
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/shop/gig", nil))
	loc, err := url.Parse(rec.Header().Get("Location"))
	if rec.Code != http.StatusSeeOther || err != nil || loc.Path != "/items/gig/wait" {
		t.Fatalf("redirect: %d %s", rec.Code, rec.Header().Get("Location"))
	}
	c := jwt.MapClaims{}
	if _, err := jwt.ParseWithClaims(loc.Query().Get("assertion"), c, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithAudience(waitroomkit.AssertionAudience)); err != nil || c["sub"] != "carol" || c["itm"] != "gig" {
		t.Fatalf("assertion %v: %v", c, err)
	}
}
