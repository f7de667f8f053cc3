package httpapi

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/redisview/view"
)

// BenchmarkPositionsStatus is a status read answered from memory
// (positions.status) for 1,000 waiting tokens read round robin, in a line
// that stands still and in one whose head moves one place every 100 reads
// (each read then tells a smaller position than the token's last). The
// item's motion is set in memory, so no read goes to Redis. Figures and
// command: BENCHMARKS.md.
func BenchmarkPositionsStatus(b *testing.B) {
	for _, name := range []string{"still", "moving"} {
		moving := name == "moving"
		b.Run(name, func(b *testing.B) {
			p := newPositions(nil, nil, time.Hour, time.Hour, 1_000_000, time.Second)
			const item, n = "drop", 1000
			gen := view.ItemGen{}
			toks := make([]string, n)
			for i := range toks {
				toks[i] = "TOKEN" + strconv.Itoa(100_000+i)
				// Seqs far above the head: the line never reaches them.
				st := line.Status{State: line.Waiting, Seq: int64(1_000_000 + i), Position: int64(1_000_000 + i), WaitingTotal: 2_000_000}
				p.remember(item, toks[i], st, gen)
			}
			mo := p.itemMotion(item)
			at := time.Now()
			set := func(head int64) {
				mo.last.Store(&motionSnap{m: line.Motion{Head: head, WaitingTotal: 2_000_000}, at: at, gen: gen})
			}
			set(0)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if moving && i%100 == 0 {
					set(int64(i / 100))
				}
				if _, ok := p.status(ctx, item, toks[i%n], gen, 0); !ok {
					b.Fatalf("read %d not answered from memory", i)
				}
			}
		})
	}
}
