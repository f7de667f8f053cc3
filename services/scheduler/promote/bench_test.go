package promote

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// BenchmarkTick: one tick over 10,000 active items of which 1,000 are busy
// (each tick admits one person from each busy line and publishes its event;
// the 9,000 others are in the registry with nobody waiting or admitted: a
// person registered and left), by one leader of everything
// (single-leader, the baseline) and by 3 replicas leading 8 shards 3/3/2,
// ticking in parallel (3-replicas: one op is the slowest replica's tick).
// Each line runs on a clock of 200 ms per tick of its leader. Run with a
// fixed count and -count 1 (the busy lines hold 150 people each, enough for
// 100 ticks; the benchmark fails if they ran dry):
//
//	go test -run '^$' -bench BenchmarkTick -benchtime 50x ./services/scheduler/promote/
func BenchmarkTick(b *testing.B) {
	const items, busy, people, shards = 10_000, 1_000, 150, 8
	rdb := testenv.Redis(b)
	brokers := testenv.Kafka(b, 12)
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(prod.Close)
	ctx := context.Background()
	line := queue.New(rdb)
	var ops []queue.Op
	for i := range items {
		item := fmt.Sprintf("b%05d", i)
		if _, err := line.ApplyItem(ctx, topics.ItemState{ItemID: item, Stock: -1, Enabled: true,
			Policy: topics.AdmissionPolicy{RatePerSecond: 5, SessionTTLSeconds: 600}, Version: 1}); err != nil {
			b.Fatal(err)
		}
		if i%(items/busy) != 0 { // an idle item: in the registry, its one person left
			ops = append(ops, queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: item + "-0", UserID: "u0", Offset: 0},
				queue.Op{Kind: queue.OpLeave, ItemID: item, TokenID: item + "-0", UserID: "u0", Offset: 1})
			continue
		}
		for p := range people {
			ops = append(ops, queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: fmt.Sprintf("%s-%03d", item, p), UserID: fmt.Sprint("u", p), Offset: int64(p)})
		}
	}
	for lo := 0; lo < len(ops); lo += 5000 {
		if _, err := line.Apply(ctx, ops[lo:min(lo+5000, len(ops))]); err != nil {
			b.Fatal(err)
		}
	}
	replica := func() *Scheduler {
		c := &stepClock{t: time.Now(), step: 200 * time.Millisecond}
		return New(rdb, prod, Options{Tick: time.Second, LockExpiry: 10 * time.Minute, Shards: shards, Clock: c.Now},
			prometheus.NewRegistry(), zap.NewNop())
	}

	b.Run("single-leader", func(b *testing.B) {
		s := replica()
		mu := s.rs.NewMutex(LockName, redsync.WithExpiry(10*time.Minute), redsync.WithTries(1))
		if err := mu.TryLockContext(ctx); err != nil {
			b.Fatal(err)
		}
		defer s.unlock(ctx, mu)
		epoch, err := rdb.Incr(ctx, EpochKey).Result()
		if err != nil {
			b.Fatal(err)
		}
		if err := s.tick(ctx, epoch, mu); err != nil { // warm-up: scripts loaded, epochs set
			b.Fatal(err)
		}
		for b.Loop() {
			if err := s.tick(ctx, epoch, mu); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("3-replicas-8-shards", func(b *testing.B) {
		reps := make([]*Scheduler, 3)
		held := make([]map[int]*lease, 3)
		for i := range reps {
			reps[i], held[i] = replica(), map[int]*lease{}
		}
		for sh := range shards {
			i := sh % 3
			l := reps[i].acquire(ctx, sh)
			if l == nil {
				b.Fatalf("shard %d not acquired", sh)
			}
			held[i][sh] = l
		}
		defer func() {
			for i := range reps {
				reps[i].stop(ctx, held[i])
			}
		}()
		tick := func() {
			var wg sync.WaitGroup
			for i := range reps {
				wg.Go(func() { reps[i].tickLeases(ctx, held[i]) })
			}
			wg.Wait()
			for i := range reps {
				if len(held[i]) != 3-i/2 {
					b.Fatalf("replica %d lost a shard: %d held", i, len(held[i]))
				}
			}
		}
		tick()
		for i := range reps { // the warm-up tick is not measured
			reps[i].m.shardTick = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shard_tick"})
		}
		for b.Loop() {
			tick()
		}
		var sum float64
		var n uint64
		for i := range reps {
			var m dto.Metric
			if err := reps[i].m.shardTick.Write(&m); err != nil {
				b.Fatal(err)
			}
			sum, n = sum+m.GetHistogram().GetSampleSum(), n+m.GetHistogram().GetSampleCount()
		}
		if n > 0 {
			b.ReportMetric(1000*sum/float64(n), "ms/shard-tick")
		}
	})
	b.StopTimer()
	if os.Getenv("WR_BENCH_STATS") != "" {
		b.Log(rdb.Info(ctx, "commandstats").Val())
	}
	st, err := line.Stats(ctx, "b00000")
	if err != nil {
		b.Fatal(err)
	}
	if st.Waiting == 0 {
		b.Fatal("the busy lines ran dry: the last ticks were not busy (use -benchtime 50x)")
	}
}
