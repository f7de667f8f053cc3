package queue_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// cpuNow is this process's user+system CPU time.
func cpuNow(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPlaceReads: one op is one token's exact place, read alone
// (Place) or in a batch of k (PlaceMany); client-cpu-µs/read is the CPU of
// this process (go-redis, the syscalls), redis-cpu-µs/read redis-server's
// main thread.
func BenchmarkPlaceReads(b *testing.B) {
	ctx := context.Background()
	rdb := testenv.Redis(b)
	l := queue.New(rdb)
	if _, err := l.ApplyItem(ctx, topics.ItemState{ItemID: "bp", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 10, SessionTTLSeconds: 60}}); err != nil {
		b.Fatal(err)
	}
	var ops []queue.Op
	toks := make([]string, 1000)
	for i := range toks {
		toks[i] = fmt.Sprintf("t%05d", i)
		ops = append(ops, reg("bp", toks[i], fmt.Sprintf("u%d", i), int64(i)))
	}
	if _, err := l.Apply(ctx, ops); err != nil {
		b.Fatal(err)
	}
	for _, k := range []int{1, 2, 8, 64} {
		name := "place"
		if k > 1 {
			name = fmt.Sprintf("many-%d", k)
		}
		b.Run(name, func(b *testing.B) {
			before, cpu0 := testenv.ReadRedisStats(b, rdb), cpuNow(b)
			b.ResetTimer()
			for i := 0; i < b.N; i += k {
				var err error
				if k == 1 {
					_, _, err = l.Place(ctx, "bp", toks[i%len(toks)])
				} else {
					lo := i % (len(toks) - k)
					_, _, err = l.PlaceMany(ctx, "bp", toks[lo:lo+k])
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after := testenv.ReadRedisStats(b, rdb)
			b.ReportMetric(float64((cpuNow(b)-cpu0).Microseconds())/float64(b.N), "client-cpu-µs/read")
			b.ReportMetric((after.MainCPU-before.MainCPU)*1e6/float64(b.N), "redis-cpu-µs/read")
		})
	}
}
