package promote

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// The shard of an item is stable and the shards are used about evenly.
func TestShardOfIsStableAndSpread(t *testing.T) {
	count := make([]int, 8)
	for i := range 8000 {
		item := fmt.Sprintf("item-%d", i)
		sh := ShardOf(item, 8)
		require.Equal(t, sh, ShardOf(item, 8))
		count[sh]++
	}
	for sh, n := range count {
		assert.InDelta(t, 1000, n, 150, "shard %d holds %d of 8000 items", sh, n)
	}
	assert.Zero(t, ShardOf("anything", 1))
	assert.Equal(t, LockName, ShardLock(0, 1))
	assert.Equal(t, LockName+":7", ShardLock(7, 8))
}

// Three replicas share 8 shards of 1,000 items (20 people each): each
// leads at most ceil(8/3) shards, no item's shard is ever led by two
// replicas at once (sampled every few ms), every item is admitted exactly
// in its registration order, and when a replica dies without releasing its
// locks, each of its shards is led again within the lock expiry plus a tick.
func TestThreeReplicasShareTheShards(t *testing.T) {
	w := newWorld(t)
	const items, people, shards = 1000, 20, 8
	const tick, expiry = 50 * time.Millisecond, time.Second
	ctx := context.Background()
	want := map[string][]string{}
	var ops []queue.Op
	names := make([]string, items)
	for i := range items {
		item := fmt.Sprintf("it%04d", i)
		names[i] = item
		_, err := w.line.ApplyItem(ctx, topics.ItemState{ItemID: item, Stock: -1, Enabled: true,
			Policy: topics.AdmissionPolicy{RatePerSecond: 4, SessionTTLSeconds: 600}, Version: 1})
		require.NoError(t, err)
		for p := range people {
			tok := fmt.Sprintf("%s-%02d", item, p)
			want[item] = append(want[item], tok)
			ops = append(ops, queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: tok, UserID: fmt.Sprint("u", p), Offset: int64(p)})
		}
	}
	for lo := 0; lo < len(ops); lo += 2000 {
		_, err := w.line.Apply(ctx, ops[lo:min(lo+2000, len(ops))])
		require.NoError(t, err)
	}

	reps := make([]*Scheduler, 3)
	stops := make([]context.CancelFunc, 3)
	var wg sync.WaitGroup
	for i := range reps {
		rctx, cancel := context.WithCancel(context.Background())
		stops[i] = cancel
		defer cancel()
		reps[i] = w.replica(Options{Tick: tick, LockExpiry: expiry, KeepLockOnStop: true, Shards: shards})
		wg.Go(func() { _ = reps[i].Run(rctx) })
	}
	led := func(i int) []int { // the shards replica i leads
		var out []int
		for sh := range shards {
			if reps[i].leading.Load()&(1<<uint(sh)) != 0 {
				out = append(out, sh)
			}
		}
		return out
	}
	sctx, stopSampling := context.WithCancel(context.Background())
	defer stopSampling()
	var twoLeaders atomic.Value
	var samples atomic.Int64
	go func() {
		for sctx.Err() == nil {
			for k := 0; k < items; k += 7 {
				n := 0
				for _, r := range reps {
					if r.Leads(names[k]) {
						n++
					}
				}
				if n > 1 {
					twoLeaders.Store(names[k])
				}
			}
			samples.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()

	// The shards spread: every replica leads some, none more than its share.
	require.Eventually(t, func() bool {
		total := 0
		for i := range reps {
			n := len(led(i))
			if n == 0 || n > 3 {
				return false
			}
			total += n
		}
		return total == shards
	}, 10*time.Second, 5*time.Millisecond, "8 shards spread 3/3/2")

	// Once about a third is admitted, replica 0 dies holding its locks.
	require.Eventually(t, func() bool {
		st, err := w.line.Stats(ctx, names[0])
		return err == nil && st.Head >= people/3
	}, 30*time.Second, 5*time.Millisecond)
	orphans := led(0)
	require.NotEmpty(t, orphans)
	killedAt := time.Now()
	stops[0]()
	for _, sh := range orphans {
		require.Eventually(t, func() bool {
			return reps[1].leading.Load()&(1<<uint(sh)) != 0 || reps[2].leading.Load()&(1<<uint(sh)) != 0
		}, 3*expiry, time.Millisecond, "shard %d is taken over", sh)
		took := time.Since(killedAt)
		t.Logf("shard %d led again %s after its replica died", sh, took.Round(time.Millisecond))
		// Bound loosely (a second expiry of slack): on a busy 2-core CI machine
		// the survivors' ticks can be late by hundreds of ms; what this
		// guards is a takeover at the lock's expiry, not at some later timeout.
		assert.LessOrEqual(t, took, 2*expiry+tick, "shard %d taken over within the lock expiry and a tick (plus scheduling slack)", sh)
	}

	evs := readAdmissions(t, w.brokers, items*people, 90*time.Second)
	stopSampling()
	for _, c := range stops {
		c()
	}
	wg.Wait()
	if v := twoLeaders.Load(); v != nil {
		t.Errorf("two replicas led the shard of %v at once", v)
	}
	t.Logf("%d leadership samples", samples.Load())
	require.Positive(t, samples.Load())
	for _, item := range names {
		assert.Equal(t, want[item], flatten(evs[item]), "item %s admitted exactly once, in order", item)
		for i := 1; i < len(evs[item]); i++ {
			assert.GreaterOrEqual(t, evs[item][i].Epoch, evs[item][i-1].Epoch, "item %s: epochs never go back", item)
		}
	}
}

// readAdmissions reads waitroom.admissions from the start until total
// distinct tokenIds were admitted, and returns each item's events in order.
func readAdmissions(t *testing.T, brokers []string, total int, timeout time.Duration) map[string][]topics.AdmissionEvent {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics.Admissions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := map[string][]topics.AdmissionEvent{}
	seen := map[string]bool{}
	for len(seen) < total {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "only %d of %d admitted in time", len(seen), total)
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := topics.DecodeAdmission(r.Value)
			require.NoError(t, err)
			if ev.Kind == topics.KindEpochClaim {
				return
			}
			out[ev.ItemID] = append(out[ev.ItemID], ev)
			for _, id := range ev.Admitted {
				seen[id] = true
			}
		})
	}
	return out
}

// A replica fenced on an item (a rebuild raised every item's epoch above
// the one it leads with) gives the shard back and leads it again with a new
// epoch on a following tick, not after the lock's expiry.
func TestFencedShardIsLedAgainAtOnce(t *testing.T) {
	w := newWorld(t)
	w.fill("r", 2000, topics.AdmissionPolicy{RatePerSecond: 200, SessionTTLSeconds: 600})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const expiry = 20 * time.Second
	r := w.replica(Options{Tick: 50 * time.Millisecond, LockExpiry: expiry, Shards: 4})
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	require.Eventually(t, func() bool {
		st, err := w.line.Stats(ctx, "r")
		return err == nil && st.Head > 0
	}, 10*time.Second, 5*time.Millisecond, "admitting")

	fence, err := w.rdb.IncrBy(ctx, EpochKey, 100).Result()
	require.NoError(t, err)
	require.NoError(t, w.rdb.Set(ctx, queue.KeysFor("r").Epoch, fence, 0).Err())
	before, err := w.line.Stats(ctx, "r")
	require.NoError(t, err)
	start := time.Now()
	require.Eventually(t, func() bool {
		st, err := w.line.Stats(ctx, "r")
		return err == nil && st.Epoch > fence && st.Head > before.Head
	}, 5*time.Second, 5*time.Millisecond, "led again with an epoch above the fence, admitting")
	t.Logf("led again %s after the fence (lock expiry %s)", time.Since(start).Round(time.Millisecond), expiry)
	cancel()
	<-done
}
