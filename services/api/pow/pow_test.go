package pow_test

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/services/api/pow"
)

var key = []byte("0123456789abcdef0123456789abcdef")

func issuer(t testing.TB, now *time.Time) *pow.Issuer {
	t.Helper()
	i, err := pow.New(key, time.Minute, pow.WithClock(func() time.Time { return *now }))
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func TestVerify(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	i := issuer(t, &now)
	c := i.Issue("concert", 12)
	x, ok := pow.Solve(c.Raw, 12, 1<<24)
	if !ok {
		t.Fatal("no solution found")
	}
	got, err := i.Verify("concert", 12, c.Raw, x)
	if err != nil {
		t.Fatalf("valid solution refused: %v", err)
	}
	if got.Item != "concert" || got.Difficulty != 12 || !got.ExpiresAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("decoded %+v", got)
	}
	// A wrong solution: find one that fails (most do).
	bad := "0"
	for n := 0; pow.LeadingZeros(pow.Hash(c.Raw, bad)) >= 12; n++ {
		bad = strings.Repeat("1", n%60+1)
	}
	other, _ := pow.New([]byte("another-key-another-key-another-k"), time.Minute)
	forged := other.Issue("concert", 1)
	fx, _ := pow.Solve(forged.Raw, 1, 1<<10)
	easy := i.Issue("concert", 1)
	ex, _ := pow.Solve(easy.Raw, 1, 1<<10)
	tampered := strings.Replace(c.Raw, ".12.", ".1.", 1)
	cases := []struct {
		name, item, ch, sol string
		min                 int
		reason              string
	}{
		{"not enough zeros", "concert", c.Raw, bad, 12, pow.ReasonWork},
		{"another item", "other", c.Raw, x, 12, pow.ReasonItem},
		{"another key", "concert", forged.Raw, fx, 1, pow.ReasonSignature},
		{"difficulty edited", "concert", tampered, x, 1, pow.ReasonSignature},
		{"easier than the item asks", "concert", easy.Raw, ex, 12, pow.ReasonEasier},
		{"garbage", "concert", "hello", x, 12, pow.ReasonMalformed},
		{"empty solution", "concert", c.Raw, "", 12, pow.ReasonMalformed},
		{"long solution", "concert", c.Raw, strings.Repeat("1", 65), 12, pow.ReasonMalformed},
		{"space in solution", "concert", c.Raw, "1 2", 12, pow.ReasonMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := i.Verify(tc.item, tc.min, tc.ch, tc.sol)
			var pe *pow.Error
			if !errors.As(err, &pe) || pe.Reason != tc.reason {
				t.Fatalf("got %v, want reason %s", err, tc.reason)
			}
		})
	}
	now = now.Add(time.Minute)
	var pe *pow.Error
	if _, err := i.Verify("concert", 12, c.Raw, x); !errors.As(err, &pe) || pe.Reason != pow.ReasonExpired {
		t.Fatalf("expired challenge: got %v", err)
	}
}

func TestLeadingZeros(t *testing.T) {
	for _, tc := range []struct {
		h    [32]byte
		want int
	}{
		{[32]byte{0x80}, 0}, {[32]byte{0x01}, 7}, {[32]byte{0, 0x40}, 9}, {[32]byte{}, 256},
	} {
		if got := pow.LeadingZeros(tc.h); got != tc.want {
			t.Errorf("LeadingZeros(%x) = %d, want %d", tc.h[:2], got, tc.want)
		}
	}
}

// TestSpent: a challenge solves one registration; the mark expires with it.
func TestSpent(t *testing.T) {
	_, rdb := testenv.RedisBackend(t)
	now := time.Now()
	i := issuer(t, &now)
	c := i.Issue("concert", 1)
	s := pow.NewSpent(rdb)
	ctx := context.Background()
	for n, want := range []bool{true, false, false} {
		first, err := s.Use(ctx, c)
		if err != nil || first != want {
			t.Fatalf("use %d: first=%v err=%v, want %v", n, first, err, want)
		}
	}
	if first, err := s.Use(ctx, i.Issue("concert", 1)); err != nil || !first {
		t.Fatalf("another challenge: first=%v err=%v", first, err)
	}
}

// BenchmarkVerify is the api's cost per registration on a proof-of-work item.
func BenchmarkVerify(b *testing.B) {
	now := time.Now()
	i := issuer(b, &now)
	c := i.Issue("concert", 16)
	x, _ := pow.Solve(c.Raw, 16, 1<<28)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := i.Verify("concert", 16, c.Raw, x); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSolve18 is what a client pays at difficulty 18 (in Go; the page's
// JavaScript is slower): on average 2^18 hashes.
func BenchmarkSolve18(b *testing.B) {
	now := time.Now()
	i := issuer(b, &now)
	for b.Loop() {
		c := i.Issue("concert", 18)
		if _, ok := pow.Solve(c.Raw, 18, 1<<30); !ok {
			b.Fatal("unsolved")
		}
	}
}

// FuzzVerify: no input crashes Verify or passes without the key's signature.
func FuzzVerify(f *testing.F) {
	now := time.Now()
	k := make([]byte, 32) // a key of this run: a challenge signed by an earlier run's key does not pass
	_, _ = rand.Read(k)
	i, _ := pow.New(k, time.Minute, pow.WithClock(func() time.Time { return now }))
	c := i.Issue("concert", 1)
	f.Add(c.Raw, "1")
	f.Add("wrpow1....", "x")
	f.Add(pow.Prefix+"Y29uY2VydA.0.9999999999999.AAAA.", "0")
	f.Fuzz(func(t *testing.T, ch, x string) {
		got, err := i.Verify("concert", 0, ch, x)
		if err == nil && (got.Raw != ch || got.Item != "concert" || pow.LeadingZeros(pow.Hash(ch, x)) < got.Difficulty) {
			t.Fatalf("accepted %+v", got)
		}
		if err == nil && ch != c.Raw {
			// Only the challenge this issuer signed passes, in its one
			// encoding (strict base64: no second spelling of it).
			t.Fatalf("accepted a challenge it did not issue: %q", ch)
		}
	})
}
