package httpapi

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// FuzzCheckStatusCursor: no input panics, and a cursor that passes tells a
// positive position and checks only for the item and token it was issued
// for.
func FuzzCheckStatusCursor(f *testing.F) {
	s := NewServer(nil, nil, nil, nil, nil, Options{CursorKey: StatusCursorKey("fuzz")}, prometheus.NewRegistry(), zap.NewNop())
	now := time.Now().Unix()
	f.Add(s.issueCursor("it", "tok", 7, now), int64(0))
	f.Add("7."+strconv.FormatInt(now, 10)+".AAAAAAAAAAAAAAAAAAAAAA", int64(0))
	f.Add("7.1.AAAAAAAAAAAAAAAAAAAAAA", int64(-3600))
	f.Add("-1.-1.", int64(0))
	f.Add("9223372036854775807.9223372036854775807.AAAAAAAAAAAAAAAAAAAAAA", int64(9e18))
	f.Fuzz(func(t *testing.T, raw string, skew int64) {
		at := now + skew%(int64(time.Hour/time.Second))
		pos, ok := s.checkCursor(raw, "it", "tok", at)
		if !ok {
			return
		}
		if pos <= 0 {
			t.Fatalf("%q passed with position %d", raw, pos)
		}
		for _, other := range [][2]string{{"it", "other"}, {"other", "tok"}} {
			if _, ok := s.checkCursor(raw, other[0], other[1], at); ok {
				t.Fatalf("%q passed for %v", raw, other)
			}
		}
	})
}
