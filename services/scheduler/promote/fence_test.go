package promote

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// holdPublish makes s's next confirmed tick stop right before it publishes:
// held is closed when it got there, and it goes on once release is closed.
func holdPublish(s *Scheduler) (held, release chan struct{}) {
	held, release = make(chan struct{}), make(chan struct{})
	s.hookPublish = func() {
		s.hookPublish = nil
		close(held)
		<-release
	}
	return held, release
}

// waitHeld waits for a held tick.
func waitHeld(t *testing.T, held chan struct{}) {
	t.Helper()
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the tick never reached its publish")
	}
}

// The seeded Sentinel run's last double admission (RELIABILITY.md): a tick
// confirmed the view, then its publish reached Kafka only after a rebuild
// had read waitroom.admissions, so the rebuilt line had those people back
// and a later tick admitted them again. The rebuild fences the schedulers'
// transactional ids before it reads: the late publish is refused, and the
// people are admitted once, by a later tick. Without the fence the window
// is there: each of them is admitted twice.
func TestALatePublishIsFencedByTheRebuild(t *testing.T) {
	for _, c := range []struct {
		name  string
		fence bool
		times int
	}{{"fenced", true, 1}, {"without the fence", false, 2}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			w := newWorld(t)
			log := zaptest.NewLogger(t)
			toks := w.record("late", 6, topics.AdmissionPolicy{RatePerSecond: 1000, MaxActive: 3, SessionTTLSeconds: 60})
			base := []kgo.Opt{kgo.SeedBrokers(w.brokers...)}
			rb := rebuild.New(w.rdb, base, log.Named("rebuild")).WithFence("")
			if c.fence {
				rb.WithFence("test-scheduler")
			}
			_, err := rb.Run(ctx, rebuild.Options{Settle: time.Millisecond, Reason: "the first build"})
			require.NoError(t, err)
			wt := view.NewWatcher(w.rdb, view.Options{Interval: time.Hour}, nil, log.Named("watcher"))
			require.True(t, wt.Check(ctx).Trusted)
			opt := Options{Tick: 50 * time.Millisecond, LockExpiry: 2 * time.Second, View: wt, Shards: 1,
				TxnPrefix: "test-scheduler", TxnOpts: base}

			s := w.replica(opt)
			l := s.acquire(ctx, 0)
			require.NotNil(t, l)
			// The build left the item's rate budget empty (settle.lua); at
			// 1,000 a second it holds the three after 3 ms. Without this
			// wait the held tick sometimes admitted two, and the third was
			// then (rightly) admitted once.
			time.Sleep(20 * time.Millisecond)
			held, release := holdPublish(s)
			done := make(chan error, 1)
			go func() {
				done <- s.tickItems(ctx, s.shardOutput(0), l.epoch, l, []string{"late"}, time.Now(), map[string]bool{}, false)
			}()
			waitHeld(t, held)
			// The view is lost meanwhile (a failover) and rebuilt from the
			// record, while the tick's admissions are not on it yet.
			_, err = rb.Run(ctx, rebuild.Options{Settle: 10 * time.Millisecond, Reason: "a failover"})
			require.NoError(t, err)
			close(release)
			require.NoError(t, <-done)
			s.drop(ctx, map[int]*lease{0: l}, 0, true)

			// The next leader, on the rebuilt view.
			require.True(t, wt.Check(ctx).Trusted)
			nu := w.replica(opt)
			rctx, stop := context.WithCancel(ctx)
			ran := make(chan struct{})
			go func() { defer close(ran); _ = nu.Run(rctx) }()
			require.Eventually(t, func() bool {
				n := w.admittedCounts(ctx, "late")
				return len(n) == 3 && n[toks[0]] == c.times
			}, 30*time.Second, 100*time.Millisecond, "the first three admitted")
			time.Sleep(500 * time.Millisecond) // ticks after it admit nobody more
			stop()
			<-ran
			want := map[string]int{}
			for _, tok := range toks[:3] {
				want[tok] = c.times
			}
			require.Equal(t, want, w.admittedCounts(ctx, "late"))
		})
	}
}

// A leader paused between its tick's confirmation and its publish (its
// lock ran out meanwhile) is fenced by the next leader of the shard, whose
// claim takes the shard's transactional id over: nothing the paused one
// sends afterwards is on the record, and the next leader publishes what it
// promoted, once.
func TestAPausedLeadersPublishIsFencedByTheNextLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w := newWorld(t)
	toks := w.fill("pz", 6, topics.AdmissionPolicy{RatePerSecond: 1000, MaxActive: 3, SessionTTLSeconds: 60})
	require.NoError(t, view.SetReady(ctx, w.rdb, "g1", nil, time.Now()))
	wt := view.NewWatcher(w.rdb, view.Options{Interval: time.Hour}, nil, zaptest.NewLogger(t))
	require.True(t, wt.Check(ctx).Trusted)
	opt := Options{Tick: time.Hour, LockExpiry: time.Minute, View: wt, Shards: 1,
		TxnPrefix: "test-scheduler", TxnOpts: []kgo.Opt{kgo.SeedBrokers(w.brokers...)}}

	old := w.replica(opt)
	ol := old.acquire(ctx, 0)
	require.NotNil(t, ol)
	held, release := holdPublish(old)
	done := make(chan error, 1)
	go func() {
		done <- old.tickItems(ctx, old.shardOutput(0), ol.epoch, ol, []string{"pz"}, time.Now(), map[string]bool{}, false)
	}()
	waitHeld(t, held)
	ol.release() // paused: its lock runs out
	require.NoError(t, w.rdb.Del(ctx, ShardLock(0, 1)).Err())
	nu := w.replica(opt)
	nl := nu.acquire(ctx, 0)
	require.NotNil(t, nl)
	require.Greater(t, nl.epoch, ol.epoch)
	close(release)
	require.NoError(t, <-done)

	require.NoError(t, nu.tickItems(ctx, nu.shardOutput(0), nl.epoch, nl, []string{"pz"}, time.Now(), map[string]bool{}, false))
	evs := w.admissions("pz", 3, 20*time.Second)
	want := map[string]int{}
	for _, tok := range toks[:3] {
		want[tok] = 1
	}
	require.Equal(t, want, w.admittedCounts(ctx, "pz"), "admitted once")
	for _, ev := range evs {
		require.Equal(t, nl.epoch, ev.Epoch, "published by the new leader alone")
	}
}
