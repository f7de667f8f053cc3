package httpapi

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/waitroom/waitroom/pkg/security/fieldmac"
	"go.uber.org/zap"
)

// BenchmarkStatusCursor is what the cursor adds to a WAITING answer: issuing
// one (a client that sends none) and checking one then issuing the next (a
// client that sends it back). Reports ns/op and allocs/op; BENCHMARKS.md
// sets it beside BenchmarkHotPaths/status.
func BenchmarkStatusCursor(b *testing.B) {
	s := NewServer(nil, nil, nil, nil, nil, Options{CursorKey: fieldmac.KeyOf("bench", cursorPurpose)}, prometheus.NewRegistry(), zap.NewNop())
	const item, tok = "concert-2026", "01JD4Q6Y8X2T0Z5K3M7N9P1R2S"
	b.Run("issue", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			if _, c := s.told("", item, tok, int64(1000+i), time.Now()); c == "" {
				b.Fatal("no cursor")
			}
		}
	})
	b.Run("check-and-issue", func(b *testing.B) {
		_, c := s.told("", item, tok, 1000, time.Now())
		b.ReportAllocs()
		for range b.N {
			if p, _ := s.told(c, item, tok, 2000, time.Now()); p != 1000 {
				b.Fatalf("told %d, want the cursor's 1000", p)
			}
		}
	})
}
