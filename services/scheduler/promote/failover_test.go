package promote

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// The seeded Sentinel run's double admission (RELIABILITY.md, "A seeded
// long run"): the view is rebuilt after a first loss, a scheduler ticks on
// the primary, the replica misses that tick (frozen, its link cut) and is
// promoted when the primary dies, and more writes on the new primary (the
// consumer's batches, one count each) outnumber the writes it lost before
// the scheduler ticks again. Counts cannot see that loss; the change of node
// can: the scheduler refuses to tick, every service answers VIEW_REBUILDING,
// and once the view is rebuilt from the record on the new primary nobody
// has been admitted twice and the view is trusted again (one rebuild).
func TestTickRefusesAPromotedReplicaThatMissedIt(t *testing.T) {
	if testenv.ClusterMode() {
		t.Skip("a Sentinel of its own whatever WR_TEST_REDIS says: once, in the single-Redis run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := testenv.StartSentinel(t)
	w := &world{t: t, rdb: s.Client(), brokers: testenv.Kafka(t, 12)}
	var err error
	w.prod, err = kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.ProducerLinger(0))
	require.NoError(t, err)
	t.Cleanup(w.prod.Close)
	w.line = queue.New(w.rdb)
	log := zaptest.NewLogger(t)

	// The record, and the first loss's rebuild of the view from it.
	toks := w.record("fo", 10, topics.AdmissionPolicy{RatePerSecond: 1000, MaxActive: 3, SessionTTLSeconds: 60})
	rb := rebuild.New(w.rdb, []kgo.Opt{kgo.SeedBrokers(w.brokers...)}, log.Named("rebuild"))
	_, err = rb.Run(ctx, rebuild.Options{Settle: time.Millisecond, Reason: "the first loss"})
	require.NoError(t, err)
	// The watcher's counts restart from the rebuilt view (no regular checks:
	// only the scheduler's own confirmations and the checks they call).
	wt := view.NewWatcher(w.rdb, view.Options{Interval: time.Hour}, nil, log.Named("watcher"))
	require.True(t, wt.Check(ctx).Trusted)
	waitInSync(t, ctx, s)

	// The replica frozen and its link cut: the tick is on the primary alone.
	require.NoError(t, syscall.Kill(s.Replica.PID(), syscall.SIGSTOP))
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = syscall.Kill(s.Replica.PID(), syscall.SIGCONT)
		}
	}
	defer thaw()
	pc := redis.NewClient(&redis.Options{Addr: s.Primary.Addr})
	require.NoError(t, pc.ClientKillByFilter(ctx, "TYPE", "replica").Err())
	_ = pc.Close()
	stop := w.runScheduler(ctx, wt)
	require.Equal(t, toks[:3], flatten(w.admissions("fo", 3, 20*time.Second)))
	stop()
	seen := wt.Status().Writes

	s.Primary.Stop() // SIGKILL
	thaw()
	require.Eventually(t, func() bool {
		a, err := s.PrimaryAddr(ctx)
		return err == nil && a == s.Replica.Addr
	}, 40*time.Second, 50*time.Millisecond, "the Sentinel promotes the replica")
	// The new primary's writes outnumber the lost ones.
	require.Eventually(t, func() bool {
		if err := view.Touch(ctx, w.rdb); err != nil {
			return false
		}
		n, err := w.rdb.HGet(ctx, view.MarkerKey, "writes").Int64()
		return err == nil && n > seen
	}, 20*time.Second, time.Millisecond, "the new primary counts more writes than the scheduler saw")
	head, err := w.rdb.Get(ctx, queue.KeysFor("fo").Head).Int64()
	require.True(t, err == nil || err == redis.Nil)
	require.Zero(t, head, "the promoted replica missed the tick")

	// The scheduler again: it either ticks (admitting again whoever the
	// replica has back in line) or refuses and marks the view stale.
	stop = w.runScheduler(ctx, wt)
	require.Eventually(t, func() bool {
		m, ok, err := view.Read(ctx, w.rdb)
		h, _ := w.rdb.Get(ctx, queue.KeysFor("fo").Head).Int64()
		return err == nil && ok && (m.State != view.Ready || h > 0)
	}, 10*time.Second, 20*time.Millisecond, "the scheduler ticks or refuses")
	want := map[string]int{}
	for _, tok := range toks[:3] {
		want[tok] = 1
	}
	require.Equal(t, want, w.admittedCounts(ctx, "fo"), "nobody admitted twice")
	m, _, err := view.Read(ctx, w.rdb)
	require.NoError(t, err)
	require.Equal(t, "stale", m.State, "the view on the promoted replica is marked stale")
	ok, why := wt.Item("fo")
	require.False(t, ok, "the item answers VIEW_REBUILDING")
	require.Contains(t, why, "node holding the view changed")
	require.False(t, wt.Check(ctx).Trusted)

	// The consumer's rebuild, on the new primary, arms the check again.
	_, err = rb.Run(ctx, rebuild.Options{Settle: time.Millisecond, Reason: "the node changed"})
	require.NoError(t, err)
	require.True(t, wt.Check(ctx).Trusted)
	gen := wt.Status().Gen
	time.Sleep(time.Second) // the scheduler ticks on the rebuilt view
	stop()
	require.True(t, wt.Check(ctx).Trusted)
	require.Equal(t, gen, wt.Status().Gen, "one rebuild for the change of node")

	require.Equal(t, want, w.admittedCounts(ctx, "fo"), "nobody admitted twice, after the rebuild either")
}

// record publishes item (policy p) and n registrations to it, as the api
// does, and returns their tokenIds in line order. Nothing is applied: the
// view is built from the record.
func (w *world) record(item string, n int, p topics.AdmissionPolicy) []string {
	ctx := context.Background()
	st := topics.ItemState{V: 1, ItemID: item, Name: item, Stock: -1, Enabled: true, Version: 1, Policy: p}
	require.NoError(w.t, w.prod.ProduceSync(ctx, &kgo.Record{Topic: topics.Items, Key: []byte(item), Value: topics.Encode(&st)}).FirstErr())
	toks := make([]string, n)
	for i := range toks {
		toks[i] = fmt.Sprintf("%s-%05d", item, i)
		ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, ItemID: item, UserID: fmt.Sprintf("u%d", i), TokenID: toks[i], RequestedAt: time.Now().UnixMilli()}
		require.NoError(w.t, w.prod.ProduceSync(ctx, &kgo.Record{Topic: topics.Registrations, Key: []byte(item), Value: topics.Encode(&ev)}).FirstErr())
	}
	return toks
}

// runScheduler runs a scheduler over the view wt watches until the returned
// stop is called.
func (w *world) runScheduler(ctx context.Context, wt *view.Watcher) (stop func()) {
	s := w.replica(Options{Tick: 50 * time.Millisecond, LockExpiry: 2 * time.Second, View: wt})
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Run(rctx) })
	return func() { cancel(); wg.Wait() }
}

// admittedCounts reads every admission event of item on the topic and
// counts each tokenId's admissions.
func (w *world) admittedCounts(ctx context.Context, item string) map[string]int {
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.ConsumeTopics(topics.Admissions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(w.t, err)
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	seen := map[string]int{}
	for pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			if ev, err := topics.DecodeAdmission(r.Value); err == nil && ev.ItemID == item {
				for _, tok := range ev.Admitted {
					seen[tok]++
				}
			}
		})
	}
	return seen
}

// waitInSync waits until the replica has every write of the primary.
func waitInSync(t *testing.T, ctx context.Context, s *testenv.SentinelRedis) {
	pc, rc := redis.NewClient(&redis.Options{Addr: s.Primary.Addr}), redis.NewClient(&redis.Options{Addr: s.Replica.Addr})
	defer pc.Close()
	defer rc.Close()
	require.Eventually(t, func() bool {
		p, err1 := pc.Info(ctx, "replication").Result()
		r, err2 := rc.Info(ctx, "replication").Result()
		return err1 == nil && err2 == nil && offset(p, "master_repl_offset:") > 0 &&
			offset(p, "master_repl_offset:") == offset(r, "slave_repl_offset:")
	}, 20*time.Second, 20*time.Millisecond, "the replica in sync")
}

// offset reads a number field of an INFO answer (-1 when missing).
func offset(info, field string) int64 {
	_, rest, ok := strings.Cut(info, field)
	if !ok {
		return -1
	}
	var n int64
	if _, err := fmt.Sscanf(rest, "%d", &n); err != nil {
		return -1
	}
	return n
}

// until is a lock held until a time.
type until time.Time

func (u until) Until() time.Time { return time.Time(u) }

// A tick whose view changed between its confirmation and its promotes (a
// rebuild started meanwhile; or a failover the client followed, retrying the
// promote on a replica that missed the last tick: the seeded Sentinel run's
// chaos-c and chaos-d) publishes nothing of them: what it wrote is not the
// record's line.
func TestATickWhoseViewChangedMidTickPublishesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := newWorld(t)
	w.fill("mid", 5, topics.AdmissionPolicy{RatePerSecond: 1000, MaxActive: 3, SessionTTLSeconds: 60})
	require.NoError(t, view.SetReady(ctx, w.rdb, "g1", nil, time.Now()))
	wt := view.NewWatcher(w.rdb, view.Options{Interval: time.Hour}, nil, zaptest.NewLogger(t))
	require.True(t, wt.Check(ctx).Trusted)
	s := w.replica(Options{Tick: time.Hour, LockExpiry: time.Minute, View: wt})

	// Confirmed (the watcher trusts g1), then a rebuild starts.
	require.NoError(t, view.SetRebuilding(ctx, w.rdb, "g2", "a rebuild started mid-tick"))
	require.NoError(t, s.tickItems(ctx, s.prod, 1, until(time.Now().Add(time.Minute)), []string{"mid"}, time.Now(), map[string]bool{}, false))
	n, err := w.rdb.ZCard(ctx, queue.KeysFor("mid").Admitted).Result()
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "the promote ran: the tick had something to publish")
	require.Empty(t, w.admittedCounts(ctx, "mid"), "nothing of it published")
	require.False(t, wt.Status().Trusted, "the changed view judged at once")
}
