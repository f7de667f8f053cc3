package sse

import "testing"

// FuzzCheckCursor: no input panics, and a cursor that passes names a place
// registration.Position can estimate from and verifies only for the item and
// token it was issued for.
func FuzzCheckCursor(f *testing.F) {
	s := &Server{cursorKey: []byte("fuzz key")}
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
