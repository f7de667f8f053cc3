package token

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAppendQueueClaimsIsMarshal(t *testing.T) {
	for _, q := range []Queue{
		{TokenID: "01JD4Q6Y8X2T0Z5K3M7N9P1R2S", ItemID: "concert-2026", UserID: "user-1", Partition: 3, Offset: 1234567},
		{TokenID: "t", ItemID: "i", UserID: `qu"o\te <b>&amp; é ` + "\x01\xff\u2028", Partition: -1, Offset: -5},
		{TokenID: "t", ItemID: "i", UserID: "u", Holder: "token"},
		{TokenID: "t", ItemID: "i", UserID: "u", Holder: "user"},
		{},
	} {
		want, err := json.Marshal(wireQueueClaims{Item: q.ItemID, Partition: q.Partition, Offset: q.Offset, Holder: q.Holder, Issuer: issuer,
			Subject: q.UserID, Audience: []string{audienceQueue}, ExpiresAt: 1_900_000_000, IssuedAt: 1_800_000_000, ID: q.TokenID})
		require.NoError(t, err)
		assert.Equal(t, string(want), string(appendQueueClaims(nil, q, 1_900_000_000, 1_800_000_000)))
	}
}

// signBody signs an arbitrary claims body with s's own header, as IssueQueue would.
func signBody(s *Signer, body []byte) string {
	buf := append([]byte(s.header+"."), base64.RawURLEncoding.EncodeToString(body)...)
	sig := s.mac.appendSig(nil, buf)
	return string(buf) + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// agree checks ParseQueue (fast path, then the library) answers raw exactly
// as golang-jwt's parser alone does.
func agree(t *testing.T, s *Signer, raw string) {
	t.Helper()
	if len(raw) > 4096 {
		return // refused before either path (TestQueueRejects)
	}
	got, gerr := s.ParseQueue(raw)
	want, werr := s.parseQueueLib(raw)
	if s.seen != nil { // a second parse may answer from memory: the same answer
		again, aerr := s.ParseQueue(raw)
		assert.Equal(t, got, again)
		assert.Equal(t, gerr, aerr)
	}
	switch {
	case werr == nil:
		require.NoError(t, gerr, "the library accepts %q", raw)
		assert.Equal(t, want, got)
	case errors.Is(werr, ErrExpired):
		assert.ErrorIs(t, gerr, ErrExpired, "library: %v; raw %q", werr, raw)
	default:
		require.Error(t, gerr, "the library refuses %q: %v", raw, werr)
		assert.ErrorIs(t, gerr, ErrInvalid)
		assert.NotErrorIs(t, gerr, ErrExpired)
	}
}

func fixedSigners(t testing.TB) map[string]*Signer {
	ss := signers(t)
	now := time.Unix(1_800_000_000, 0)
	for _, s := range ss {
		s.now = func() time.Time { return now }
	}
	ss[HS256+"-remembered"] = signers(t)[HS256].WithClock(func() time.Time { return now }).RememberVerified(64)
	return ss
}

func TestParseQueueFastAgreesWithLibrary(t *testing.T) {
	bodies := []string{
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800003600,"iat":1800000000,"jti":"t"}`,
		`{"jti":"t","iat":1800000000,"exp":1800003600,"aud":["waitroom-queue"],"sub":"u","iss":"waitroom","o":2,"p":1,"itm":"i"}`,
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800000004,"jti":"t"}`,                  // within leeway
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800000005,"jti":"t"}`,                  // at the leeway: expired
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1799999000,"jti":"t"}`,                  // expired
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"jti":"t"}`,                                   // no exp
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800003600,"iat":1800000006,"jti":"t"}`, // issued in the future
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800003600,"iat":1800000005,"jti":"t"}`,
		`{"itm":"i","p":1,"o":2,"iss":"other","sub":"u","aud":["waitroom-queue"],"exp":1800003600,"jti":"t"}`,
		`{"itm":"i","p":1,"o":2,"sub":"u","aud":["waitroom-queue"],"exp":1800003600,"jti":"t"}`,
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-admission"],"exp":1800003600,"jti":"t"}`,
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue","x"],"exp":1800003600,"jti":"t"}`,
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":"waitroom-queue","exp":1800003600,"jti":"t"}`,
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":[],"exp":1800003600,"jti":"t"}`,
		`{"itm":"i","p":-1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800003600,"jti":"t"}`,
		`{"itm":"i","p":1,"o":-2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800003600,"jti":"t"}`,
		`{"itm":"i","p":4294967296,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800003600,"jti":"t"}`,
		`{"itm":"","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800003600,"jti":"t"}`,
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","aud":["waitroom-queue"],"exp":1800003600,"jti":"t"}`,
		`{"ITM":"i","itm":"j","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800003600,"jti":"t"}`,
		`{"itm":"i","itm":"j","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800003600,"jti":"t"}`,
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u\u00e9","aud":["waitroom-queue"],"exp":1800003600,"jti":"t"}`,
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800003600.5,"jti":"t"}`,
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1.8e9,"jti":"t"}`,
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800003600,"nbf":1900000000,"jti":"t"}`,
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":null,"jti":"t"}`,
		` { "itm" : "i" , "p" : 1 , "o":2,"iss":"waitroom","sub":"u","aud":[ "waitroom-queue" ],"exp":1800003600,"jti":"t" } `,
		`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800003600,"jti":"t"}x`,
		`{}`, `[]`, `null`, ``, `{"itm":"i",}`,
	}
	for name, s := range fixedSigners(t) {
		t.Run(name, func(t *testing.T) {
			for _, b := range bodies {
				agree(t, s, signBody(s, []byte(b)))
			}
			good := signBody(s, []byte(bodies[0]))
			agree(t, s, good[:len(good)-2]+"AA") // a wrong signature
			agree(t, s, good+"=")
		})
	}
}

func TestParseQueueOtherHeaderGoesToTheLibrary(t *testing.T) {
	s := fixedSigners(t)[HS256]
	claims := jwt.MapClaims{"itm": "i", "p": 1, "o": 2, "iss": issuer, "sub": "u", "aud": []string{audienceQueue}, "exp": 1800003600, "jti": "t"}
	// The same key and algorithm but another header: not the fast path's, and
	// the library accepts it as before.
	other, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(testSecret)
	require.NoError(t, err)
	_, r := s.parseQueueFast(other)
	assert.Equal(t, fastFallback, r)
	q, err := s.ParseQueue(other)
	require.NoError(t, err)
	assert.Equal(t, "u", q.UserID)
	// Another algorithm with the same secret: refused (the algorithm is pinned).
	hs384, err := jwt.NewWithClaims(jwt.SigningMethodHS384, claims).SignedString(testSecret)
	require.NoError(t, err)
	_, err = s.ParseQueue(hs384)
	assert.ErrorIs(t, err, ErrInvalid)
}

func FuzzParseQueueFastAgrees(f *testing.F) {
	f.Add(`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1800003600,"iat":1800000000,"jti":"t"}`, false)
	f.Add(`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":["waitroom-queue"],"exp":1799999000,"jti":"t"}`, false)
	f.Add(`{"itm":"i","p":1,"o":2,"iss":"waitroom","sub":"u","aud":"waitroom-queue","exp":1800003600,"jti":"t"}`, true)
	s := fixedSigners(f)[HS256+"-remembered"]
	f.Fuzz(func(t *testing.T, body string, raw bool) {
		if raw {
			agree(t, s, body) // any string as a token
			return
		}
		agree(t, s, signBody(s, []byte(body))) // any claims, validly signed
	})
}

func BenchmarkParseQueueLibrary(b *testing.B) {
	s := signers(b)[HS256]
	raw, _ := s.IssueQueue(Queue{TokenID: "01JD4Q6Y8X2T0Z5K3M7N9P1R2S", ItemID: "concert-2026", UserID: "user-123456", Partition: 3, Offset: 1234567}, time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.parseQueueLib(raw); err != nil {
			b.Fatal(err)
		}
	}
}
