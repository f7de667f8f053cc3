package token

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func signers(t testing.TB) map[string]*Signer {
	h, err := NewHMAC(testSecret, "k1")
	require.NoError(t, err)
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	e, err := NewEd25519(priv, "k1")
	require.NoError(t, err)
	return map[string]*Signer{HS256: h, EdDSA: e}
}

func TestQueueRoundTrip(t *testing.T) {
	for name, s := range signers(t) {
		t.Run(name, func(t *testing.T) {
			q := Queue{TokenID: "tok1", ItemID: "item-1", UserID: "u:1", Holder: "token", Partition: 7, Offset: 12345}
			raw, err := s.IssueQueue(q, time.Hour)
			require.NoError(t, err)
			got, err := s.ParseQueue(raw)
			require.NoError(t, err)
			assert.Equal(t, q.TokenID, got.TokenID)
			assert.Equal(t, q.ItemID, got.ItemID)
			assert.Equal(t, q.UserID, got.UserID)
			assert.Equal(t, "token", got.Holder)
			assert.Equal(t, "tok1", got.PlaceKey(), "a token-held place is keyed by its token, not the typed userId")
			assert.False(t, got.Proven())
			assert.Equal(t, q.Partition, got.Partition)
			assert.Equal(t, q.Offset, got.Offset)
			assert.WithinDuration(t, time.Now().Add(time.Hour), got.ExpiresAt, 2*time.Second)
		})
	}
}

func TestQueueRejects(t *testing.T) {
	s := signers(t)[HS256]
	other, err := NewHMAC([]byte("another-secret-another-secret-xx"), "k1")
	require.NoError(t, err)
	good, err := s.IssueQueue(Queue{TokenID: "t", ItemID: "i", UserID: "u"}, time.Hour)
	require.NoError(t, err)
	forged, err := other.IssueQueue(Queue{TokenID: "t", ItemID: "i", UserID: "u"}, time.Hour)
	require.NoError(t, err)
	expired, err := s.IssueQueue(Queue{TokenID: "t", ItemID: "i", UserID: "u"}, -time.Minute)
	require.NoError(t, err)
	parts := strings.Split(good, ".")
	noneAlg := "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + parts[1] + "."

	cases := map[string]struct {
		raw  string
		want error
	}{
		"forged":        {forged, ErrInvalid},
		"expired":       {expired, ErrExpired},
		"alg none":      {noneAlg, ErrInvalid},
		"garbage":       {"not-a-jwt", ErrInvalid},
		"empty":         {"", ErrInvalid},
		"tampered body": {parts[0] + "." + parts[1] + "x." + parts[2], ErrInvalid},
		"huge":          {strings.Repeat("a", 5000), ErrInvalid},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := s.ParseQueue(c.raw)
			assert.True(t, errors.Is(err, c.want), "got %v, want %v", err, c.want)
		})
	}
}

func TestNewFromConfig(t *testing.T) {
	_, err := New(HS256, "short", "k")
	assert.Error(t, err)
	_, err = New("RS256", string(testSecret), "k")
	assert.Error(t, err)
	_, err = New(EdDSA, "not base64!", "k")
	assert.Error(t, err)
	s, err := New(HS256, string(testSecret), "k")
	require.NoError(t, err)
	assert.Equal(t, HS256, s.Alg())
	s, err = New(EdDSA, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "k")
	require.NoError(t, err)
	assert.Equal(t, EdDSA, s.Alg())
}

func FuzzParseQueue(f *testing.F) {
	s, err := NewHMAC(testSecret, "k1")
	if err != nil {
		f.Fatal(err)
	}
	good, _ := s.IssueQueue(Queue{TokenID: "t", ItemID: "i", UserID: "u", Partition: 1, Offset: 2}, time.Hour)
	f.Add(good)
	f.Add("")
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := s.ParseQueue(raw)
		if err == nil {
			// Only a token this key signed may pass, and it must carry its claims.
			if q.TokenID == "" || q.ItemID == "" || q.UserID == "" {
				t.Fatalf("accepted a token without claims: %q", raw)
			}
		} else if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrExpired) {
			t.Fatalf("unexpected error class: %v", err)
		}
	})
}

func BenchmarkIssueQueue(b *testing.B) {
	for name, s := range signers(b) {
		b.Run(name, func(b *testing.B) {
			q := Queue{TokenID: "01JD4Q6Y8X2T0Z5K3M7N9P1R2S", ItemID: "concert-2026", UserID: "user-123456", Partition: 3, Offset: 1234567}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.IssueQueue(q, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseQueue(b *testing.B) {
	for name, s := range signers(b) {
		b.Run(name, func(b *testing.B) {
			raw, _ := s.IssueQueue(Queue{TokenID: "01JD4Q6Y8X2T0Z5K3M7N9P1R2S", ItemID: "concert-2026", UserID: "user-123456", Partition: 3, Offset: 1234567}, time.Hour)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.ParseQueue(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// AppendQueue appends the token IssueQueue returns to what dst holds, leaves
// that as it was, and the token it appends verifies (the signature covers
// the token only, not dst's prefix).
func TestAppendQueueAppendsIssueQueuesToken(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for name, s := range signers(t) {
		t.Run(name, func(t *testing.T) {
			s = s.WithClock(func() time.Time { return now })
			q := Queue{TokenID: "tok1", ItemID: "item-1", UserID: "u:1", Holder: "token", Partition: 7, Offset: 12345}
			want, err := s.IssueQueue(q, time.Hour)
			require.NoError(t, err)
			prefix := "/api/v1/items/item-1/registrations/"
			dst := append(make([]byte, 0, 8), prefix...)
			got, err := s.AppendQueue(dst, q, time.Hour)
			require.NoError(t, err)
			require.Equal(t, prefix+want, string(got))
			parsed, err := s.ParseQueue(string(got[len(prefix):]))
			require.NoError(t, err)
			assert.True(t, parsed.IssuedAt.Equal(now), parsed.IssuedAt)
			assert.True(t, parsed.ExpiresAt.Equal(now.Add(time.Hour)), parsed.ExpiresAt)
			parsed.IssuedAt, parsed.ExpiresAt = time.Time{}, time.Time{}
			assert.Equal(t, q, parsed)
		})
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	adm, err := NewES256(priv, "k1")
	require.NoError(t, err)
	dst, err := adm.AppendQueue([]byte("keep"), Queue{TokenID: "t"}, time.Hour)
	require.Error(t, err, "an admission signer signs no queue token")
	assert.Equal(t, "keep", string(dst))
}
