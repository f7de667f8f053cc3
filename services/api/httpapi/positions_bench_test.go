package httpapi

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
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
				if _, ok := p.status(ctx, item, toks[i%n], gen, 0, posLook{}); !ok {
					b.Fatalf("read %d not answered from memory", i)
				}
			}
		})
	}
}

// BenchmarkStatusBucketAndPlace is a status read's two per-token look-ups
// from memory, its status bucket and its remembered place, for n waiting
// tokens read round robin in a still line: one record found by takeStatus,
// then positions.status from it. (Before the records, the same read was
// memBuckets.allow and positions.status, a sharded map each.) With 100,000
// tokens most look-ups miss the CPU's caches, as in a sale. Figures and
// command: BENCHMARKS.md. (The bucket's burst is never drained nor refilled
// here, so neither tree drops and makes buckets: the look-ups alone.)
func BenchmarkStatusBucketAndPlace(b *testing.B) {
	for _, n := range []int{1000, 100_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			p := newPositions(nil, nil, time.Hour, time.Hour, 1_000_000, time.Second)
			p.useBucket(newMemBuckets(redis_rate.Limit{Rate: 1, Burst: 1e9, Period: time.Second}, 1))
			const item = "drop"
			gen := view.ItemGen{}
			toks := make([]string, n)
			for i := range toks {
				toks[i] = "TOKEN" + strconv.Itoa(1_000_000+i)
				st := line.Status{State: line.Waiting, Seq: int64(1_000_000 + i), Position: int64(1_000_000 + i), WaitingTotal: 2_000_000}
				p.remember(item, toks[i], st, gen)
			}
			p.itemMotion(item).last.Store(&motionSnap{m: line.Motion{WaitingTotal: 2_000_000}, at: time.Now(), gen: gen})
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				tok := toks[i%n]
				ok, _, look := p.takeStatus(item, tok, nil)
				if !ok {
					b.Fatalf("read %d refused", i)
				}
				if _, ok := p.status(ctx, item, tok, gen, 0, look); !ok {
					b.Fatalf("read %d not answered from memory", i)
				}
			}
		})
	}
}
