package promote

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// A Redis rolled back under a leading scheduler (a failover to a replica
// that missed its last tick: the admissions undone, the marker's write
// count lower than the scheduler's own tick counted) is refused by the next
// tick's confirmation before anyone is admitted again, and marked stale at
// once, without waiting for the watcher's next check (the chaos suite's
// Sentinel failovers admitted 19 people twice before this).
func TestTickRefusesARolledBackView(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := newWorld(t)
	toks := w.fill("rb", 10, topics.AdmissionPolicy{RatePerSecond: 1000, MaxActive: 3, SessionTTLSeconds: 60})
	require.NoError(t, view.SetReady(ctx, w.rdb, "g1", nil, time.Now()))
	wt := view.NewWatcher(w.rdb, view.Options{Interval: time.Hour}, nil, zaptest.NewLogger(t))
	require.True(t, wt.Check(ctx).Trusted)

	s := w.replica(Options{Tick: 50 * time.Millisecond, LockExpiry: 2 * time.Second, View: wt})
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(rctx) })
	defer func() { stop(); wg.Wait() }()
	first := w.admissions("rb", 3, 10*time.Second)
	var admitted []string
	for _, ev := range first {
		admitted = append(admitted, ev.Admitted...)
	}
	require.Equal(t, toks[:3], admitted)

	// The failover: the three are back in line, nothing to publish, and
	// the marker counts fewer writes than the scheduler's tick did.
	// The marker first (it lives in another slot on a cluster): a tick
	// between the two writes must already be refused.
	require.NoError(t, w.rdb.HIncrBy(ctx, view.MarkerKey, "writes", -1_000_000).Err())
	k := queue.KeysFor("rb")
	_, err := w.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, k.Admitted, toks[0], toks[1], toks[2])
		for i := range 3 {
			p.ZAdd(ctx, k.Waiting, redis.Z{Score: float64(i + 1), Member: toks[i]})
		}
		p.Del(ctx, k.Unpublished)
		p.Set(ctx, k.Head, 0, 0)
		return nil
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		m, ok, err := view.Read(ctx, w.rdb)
		return err == nil && ok && m.State != view.Ready
	}, 5*time.Second, 20*time.Millisecond, "the rolled-back view is marked stale by the scheduler")
	time.Sleep(300 * time.Millisecond) // six more ticks

	cl, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.ConsumeTopics(topics.Admissions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	seen := map[string]int{}
	for pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			if ev, err := topics.DecodeAdmission(r.Value); err == nil && ev.ItemID == "rb" {
				for _, tok := range ev.Admitted {
					seen[tok]++
				}
			}
		})
	}
	require.Equal(t, map[string]int{toks[0]: 1, toks[1]: 1, toks[2]: 1}, seen, "nobody admitted again from the rolled-back view")
}
