package sse

import (
	"testing"

	"github.com/waitroom/waitroom/pkg/security/fieldmac"
)

// FuzzCheckCursor: no input panics, and a cursor that passes names a place
// registration.Position can estimate from and verifies only for the item and
// token it was issued for.
func FuzzCheckCursor(f *testing.F) {
	s := &Server{cursors: fieldmac.New([]byte("fuzz key"))}
	f.Add(s.issueCursor("it", "tok", cursor{seq: 6, refHead: 2, refPos: 4}))
	f.Add("6.2.4.AAAAAAAAAAAAAAAAAAAAAA")
	f.Add("6.2.4")
	f.Add("-1.0.1.AAAAAAAAAAAAAAAAAAAAAA")
	f.Add("9223372036854775807.0.9223372036854775807.AAAAAAAAAAAAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, raw string) {
		c, ok := s.checkCursor("it", "tok", raw)
		if !ok {
			return
		}
		if c.seq <= 0 || c.refPos <= 0 || c.refHead >= c.seq || c.refPos > c.seq-c.refHead {
			t.Fatalf("%q passed with a place out of range: %+v", raw, c)
		}
		if _, ok := s.checkCursor("it", "other", raw); ok {
			t.Fatalf("%q passed for another token", raw)
		}
		if _, ok := s.checkCursor("other", "tok", raw); ok {
			t.Fatalf("%q passed for another item", raw)
		}
		if again, ok := s.checkCursor("it", "tok", s.issueCursor("it", "tok", c)); !ok || again != c {
			t.Fatalf("%q: the cursor issued for %+v does not pass as it", raw, c)
		}
	})
}

// BenchmarkIssueCursor is the cursor a stream issues after each exact read
// of its place: reports ns/op and allocs/op.
func BenchmarkIssueCursor(b *testing.B) {
	s := &Server{cursors: fieldmac.Random()}
	b.ReportAllocs()
	for i := range b.N {
		if s.issueCursor("item-1", "0123456789abcdef0123456789abcdef", cursor{seq: int64(i + 10), refHead: 3, refPos: 5}) == "" {
			b.Fatal("no cursor")
		}
	}
}
