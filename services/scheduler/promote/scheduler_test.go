package promote

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

type world struct {
	t       *testing.T
	rdb     redis.UniversalClient
	brokers []string
	prod    *kgo.Client
	line    *queue.Line
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, rdb: testenv.Redis(t), brokers: testenv.Kafka(t, 12)}
	var err error
	w.prod, err = kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.ProducerLinger(0))
	require.NoError(t, err)
	t.Cleanup(w.prod.Close)
	w.line = queue.New(w.rdb)
	return w
}

// fill registers n people for item, with policy p, and returns their tokenIds in line order.
func (w *world) fill(item string, n int, p topics.AdmissionPolicy) []string {
	ctx := context.Background()
	_, err := w.line.ApplyItem(ctx, topics.ItemState{ItemID: item, Stock: -1, Enabled: true, Policy: p, Version: 1})
	require.NoError(w.t, err)
	want := make([]string, n)
	ops := make([]queue.Op, n)
	for i := range n {
		want[i] = fmt.Sprintf("%s-%05d", item, i)
		ops[i] = queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: want[i], UserID: fmt.Sprintf("u%d", i), Offset: int64(i)}
	}
	for lo := 0; lo < n; lo += 2000 {
		_, err := w.line.Apply(ctx, ops[lo:min(lo+2000, n)])
		require.NoError(w.t, err)
	}
	return want
}

func (w *world) replica(opt Options) *Scheduler {
	return New(w.rdb, w.prod, opt, prometheus.NewRegistry(), zaptest.NewLogger(w.t))
}

// admissions reads the admission events of item until total tokens were admitted.
func (w *world) admissions(item string, total int, timeout time.Duration) []topics.AdmissionEvent {
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.ConsumeTopics(topics.Admissions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(w.t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []topics.AdmissionEvent
	seen := map[string]bool{}
	for len(seen) < total {
		fs := cl.PollFetches(ctx)
		require.NoError(w.t, ctx.Err(), "only %d of %d admitted in time", len(seen), total)
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := topics.DecodeAdmission(r.Value)
			require.NoError(w.t, err)
			if ev.ItemID == item {
				out = append(out, ev)
				for _, id := range ev.Admitted {
					seen[id] = true
				}
			}
		})
	}
	return out
}

// watchActive samples the admitted set every few ms and records the most seen.
func (w *world) watchActive(ctx context.Context, item string) *atomic.Int64 {
	var most atomic.Int64
	go func() {
		for ctx.Err() == nil {
			n, err := w.rdb.ZCard(ctx, queue.KeysFor(item).Admitted).Result()
			if err == nil && n > most.Load() {
				most.Store(n)
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
	return &most
}

// flatten lists the admitted tokenIds of the events in order, each once:
// events are at least once, so a leader that died between publishing and
// acknowledging hands the same tokens out again, in the same order.
func flatten(evs []topics.AdmissionEvent) []string {
	var out []string
	seen := map[string]bool{}
	for _, e := range evs {
		for _, id := range e.Admitted {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}

// stepClock is a line clock that moves on by step at every reading. The
// leader reads it once a tick, so every tick sees exactly step of time pass
// however fast the ticks really come or however slow the machine is.
type stepClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

// Three replicas, 10,000 waiting, 500/s: everyone admitted exactly once, in
// registration order, and never more than maxActive at once. The line runs on
// a clock of 200 ms per tick while the replicas tick every 20 ms: the 20 s of
// the line's time pass in about 2 s.
func TestThreeReplicasAdmitInOrderExactlyOnce(t *testing.T) {
	w := newWorld(t)
	// Sessions of 1 s turn places over at 600/s; the first second's burst of
	// the rate budget runs into maxActive, which must hold.
	const maxActive = 600
	want := w.fill("drop", 10_000, topics.AdmissionPolicy{RatePerSecond: 500, MaxActive: maxActive, SessionTTLSeconds: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	most := w.watchActive(ctx, "drop")
	clock := &stepClock{t: time.Now(), step: 200 * time.Millisecond}
	var wg sync.WaitGroup
	reps := make([]*Scheduler, 3)
	for i := range reps {
		reps[i] = w.replica(Options{Tick: 20 * time.Millisecond, LockExpiry: 2 * time.Second, Clock: clock.Now})
		wg.Go(func() { _ = reps[i].Run(ctx) })
	}
	var twoLeaders atomic.Bool
	go func() {
		for ctx.Err() == nil {
			n := 0
			for _, r := range reps {
				if r.Leads("drop") {
					n++
				}
			}
			if n > 1 {
				twoLeaders.Store(true)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	evs := w.admissions("drop", len(want), 90*time.Second)
	cancel()
	wg.Wait()

	assert.Equal(t, want, flatten(evs), "admitted exactly once, in registration order")
	var raw []string
	for _, e := range evs {
		raw = append(raw, e.Admitted...)
	}
	assert.Equal(t, len(want), len(raw), "with no crash, no admission is published twice")
	st, err := w.line.Stats(context.Background(), "drop")
	require.NoError(t, err)
	assert.Equal(t, int64(len(want)), st.Head)
	assert.Zero(t, st.Waiting)
	assert.LessOrEqual(t, most.Load(), int64(maxActive), "never more than maxActive admitted at once")
	assert.Equal(t, int64(maxActive), most.Load(), "the burst did reach maxActive (the cap was exercised)")
	assert.False(t, twoLeaders.Load(), "two replicas led at once")
	for i := 1; i < len(evs); i++ {
		assert.GreaterOrEqual(t, evs[i].Epoch, evs[i-1].Epoch)
		if len(evs[i].Admitted) > 0 && len(evs[i-1].Admitted) > 0 {
			assert.Greater(t, evs[i].Head, evs[i-1].Head)
		}
	}
}

// The leader dies mid-run without releasing its lock: another replica leads
// within the lock expiry, and admission goes on with no gap and no duplicate.
func TestLeaderKilledMidRun(t *testing.T) {
	w := newWorld(t)
	want := w.fill("k", 3000, topics.AdmissionPolicy{RatePerSecond: 1000, SessionTTLSeconds: 60})
	const expiry = time.Second
	ctxs := make([]context.CancelFunc, 3)
	reps := make([]*Scheduler, 3)
	var wg sync.WaitGroup
	for i := range reps {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[i] = cancel
		defer cancel()
		reps[i] = w.replica(Options{Tick: 100 * time.Millisecond, LockExpiry: expiry, KeepLockOnStop: true})
		wg.Go(func() { _ = reps[i].Run(ctx) })
	}
	// Kill the leader once about a third is admitted.
	require.Eventually(t, func() bool {
		st, err := w.line.Stats(context.Background(), "k")
		return err == nil && st.Head >= 1000
	}, 30*time.Second, 5*time.Millisecond)
	killed := -1
	for i, r := range reps {
		if r.Leads("k") {
			killed = i
			ctxs[i]()
		}
	}
	require.NotEqual(t, -1, killed, "someone was leading")

	evs := w.admissions("k", len(want), 60*time.Second)
	for _, c := range ctxs {
		c()
	}
	wg.Wait()
	assert.Equal(t, want, flatten(evs), "no gap in order, no duplicate across the change of leader")
	var before, after *topics.AdmissionEvent
	for i := range evs {
		if evs[i].Epoch == evs[0].Epoch {
			before = &evs[i]
		} else if after == nil {
			after = &evs[i]
		}
	}
	require.NotNil(t, after, "a new epoch took over")
	gap := time.UnixMilli(after.At).Sub(time.UnixMilli(before.At))
	assert.Less(t, gap, expiry+time.Second, "the next leader started within the lock expiry (plus a tick and scheduling slack)")
	assert.False(t, reps[killed].Leads("k"))
}

// A leader paused past its lock expiry while another leads cannot admit: the
// tick refuses on the lock's deadline, and promote refuses its stale epoch.
func TestPausedExLeaderIsFenced(t *testing.T) {
	w := newWorld(t)
	w.fill("f", 100, topics.AdmissionPolicy{RatePerSecond: 1000, SessionTTLSeconds: 60})
	ctx := context.Background()
	old := w.replica(Options{Tick: 100 * time.Millisecond, LockExpiry: 300 * time.Millisecond})
	mu := old.rs.NewMutex(LockName, redsync.WithExpiry(300*time.Millisecond), redsync.WithTries(1))
	require.NoError(t, mu.TryLockContext(ctx))
	oldEpoch, err := w.rdb.Incr(ctx, EpochKey).Result()
	require.NoError(t, err)

	time.Sleep(400 * time.Millisecond) // the old leader is "paused" past its expiry
	err = old.tick(ctx, oldEpoch, mu)
	require.ErrorIs(t, err, errStepDown, "the lock deadline stops it first")

	// Another replica leads now (newer epoch) and admits.
	nu := w.replica(Options{Tick: 100 * time.Millisecond, LockExpiry: time.Second})
	mu2 := nu.rs.NewMutex(LockName, redsync.WithExpiry(time.Second), redsync.WithTries(1))
	require.NoError(t, mu2.TryLockContext(ctx))
	newEpoch, err := w.rdb.Incr(ctx, EpochKey).Result()
	require.NoError(t, err)
	require.NoError(t, nu.tick(ctx, newEpoch, mu2))
	before, err := w.line.Stats(ctx, "f")
	require.NoError(t, err)
	require.Positive(t, before.Admitted)

	// Even if the old leader believed its lock valid (a clock jump, a GC pause
	// between the check and the write), its epoch is refused in Redis.
	stillValid := old.rs.NewMutex("another-lock", redsync.WithExpiry(time.Minute), redsync.WithTries(1))
	require.NoError(t, stillValid.TryLockContext(ctx))
	err = old.tick(ctx, oldEpoch, stillValid)
	require.ErrorIs(t, err, errStepDown)
	assert.ErrorContains(t, err, "newer epoch")
	after, err := w.line.Stats(ctx, "f")
	require.NoError(t, err)
	assert.Equal(t, before.Head, after.Head, "the fenced tick admitted nobody")
	assert.Equal(t, before.Admitted, after.Admitted)
}
