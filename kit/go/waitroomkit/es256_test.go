package waitroomkit_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/waitroom/waitroom/kit/go/waitroomkit"
)

// A room whose operator chose ES256 admission tokens (WR_ADMISSION_ALG):
// the kit takes the P-256 key from the JWKS and verifies them offline; a
// token that names the key but another algorithm is refused.
func TestVerifyOfflineES256(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	point, err := priv.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	set := `{"keys":[{"kty":"EC","crv":"P-256","alg":"ES256","use":"sig","kid":"e1","x":"` + b64(point[1:33]) + `","y":"` + b64(point[33:]) + `"}]}`
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(set))
	}))
	defer api.Close()
	kit, err := waitroomkit.New(api.URL, waitroomkit.WithJWKSURL(api.URL+"/.well-known/jwks.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer kit.Close()
	claims := jwt.MapClaims{"iss": waitroomkit.Issuer, "aud": []string{waitroomkit.Audience}, "sub": "zoe", "itm": "tix",
		"jti": "T1", "iat": time.Now().Unix(), "exp": time.Now().Add(time.Minute).Unix()}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = "e1"
	raw, err := tok.SignedString(priv)
	if err != nil {
		t.Fatal(err)
	}
	a, err := kit.VerifyOffline(context.Background(), raw, "tix")
	if err != nil || a.UserID != "zoe" || a.TokenID != "T1" {
		t.Fatalf("ES256 admission: %+v, %v", a, err)
	}
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	hs.Header["kid"] = "e1"
	forged, err := hs.SignedString(point)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kit.VerifyOffline(context.Background(), forged, "tix"); !errors.Is(err, waitroomkit.ErrInvalid) {
		t.Fatalf("HS256 keyed by the public point: %v, want ErrInvalid", err)
	}
}
