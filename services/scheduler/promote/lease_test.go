package promote

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// slowKafka answers every produce late, as a Kafka on a starved machine (or
// behind a slow link) does: the records are written, the answer comes after
// delay.
type slowKafka struct {
	Producer
	delay time.Duration
}

func (k slowKafka) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	time.Sleep(k.delay)
	return k.Producer.ProduceSync(ctx, rs...)
}

// A replica whose passes take longer than the lock expiry (here each epoch
// claim and each tick's publish answers in 2/3 of it, and it leads four
// shards) keeps its shards and admits on every one of them: its leases are
// extended apart from the ticks. Before, the locks were extended once a pass,
// so the first shard's lock had run out before its first tick; the replica
// stepped down, took it again with a new epoch, and lost the next one: the
// leadership churn (52-62 changes a minute) of the seeded long run in which
// every line stopped at once (RELIABILITY.md).
func TestSlowPassesKeepTheirShards(t *testing.T) {
	w := newWorld(t)
	const shards = 4
	expiry := 600 * time.Millisecond
	items := make([]string, shards) // one item on each shard
	for n, left := 0, shards; left > 0; n++ {
		it := fmt.Sprintf("slow-%d", n)
		if sh := ShardOf(it, shards); items[sh] == "" {
			items[sh] = it
			left--
		}
	}
	const people = 30
	for _, it := range items {
		w.fill(it, people, topics.AdmissionPolicy{RatePerSecond: 10, SessionTTLSeconds: 60})
	}
	r := New(w.rdb, slowKafka{Producer: w.prod, delay: expiry * 2 / 3}, Options{Tick: 50 * time.Millisecond, LockExpiry: expiry, Shards: shards},
		prometheus.NewRegistry(), zaptest.NewLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	// Every item's line moves (10 a second: 30 people in about 3 s once led).
	require.Eventually(t, func() bool {
		for _, it := range items {
			st, err := w.line.Stats(context.Background(), it)
			if err != nil || st.Admitted < people {
				return false
			}
		}
		return true
	}, 20*time.Second, 100*time.Millisecond, "every shard's item admitted everyone")
	epochs, err := w.rdb.Get(context.Background(), EpochKey).Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(shards), epochs, "one leadership per shard, none lost and taken again")
}

// stuckKafka stops answering once stuck is closed, until free is: a produce
// that never returns (a bug, a client wedged on a dead connection).
type stuckKafka struct {
	Producer
	stuck, free chan struct{}
}

func (k stuckKafka) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	select {
	case <-k.stuck:
		<-k.free
	default:
	}
	return k.Producer.ProduceSync(ctx, rs...)
}

// Leases extended apart from the ticks must not outlive a replica whose loop
// is stuck for good: past stallFactor lock expiries without progress its
// shards are given up, and another replica leads them and admits.
func TestAStuckReplicaGivesItsShardsUp(t *testing.T) {
	w := newWorld(t)
	w.fill("stuck", 200, topics.AdmissionPolicy{RatePerSecond: 20, SessionTTLSeconds: 60})
	expiry := 300 * time.Millisecond
	opt := Options{Tick: 20 * time.Millisecond, LockExpiry: expiry, Shards: 1}
	k := stuckKafka{Producer: w.prod, stuck: make(chan struct{}), free: make(chan struct{})}
	a := New(w.rdb, k, opt, prometheus.NewRegistry(), zaptest.NewLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); close(k.free); wg.Wait() }()
	wg.Go(func() { _ = a.Run(ctx) })
	require.Eventually(t, func() bool { return a.Leads("stuck") }, 5*time.Second, 10*time.Millisecond)
	b := w.replica(opt)
	wg.Go(func() { _ = b.Run(ctx) })

	close(k.stuck) // a's next publish never returns
	stuckAt := time.Now()
	require.Eventually(t, func() bool { return b.Leads("stuck") }, 10*time.Second, 10*time.Millisecond,
		"the stuck replica gave its shard up")
	assert.Less(t, time.Since(stuckAt), stallFactor*expiry+2*time.Second, "within the stall limit and a lock expiry (plus slack)")
	before, err := w.line.Stats(context.Background(), "stuck")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := w.line.Stats(context.Background(), "stuck")
		return err == nil && st.Head > before.Head
	}, 5*time.Second, 20*time.Millisecond, "the new leader admits")
}
