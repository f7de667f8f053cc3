package promote

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// The leader's per-item figures follow its ticks (what the alert "admission
// below the set rate while people wait" reads), and go when it stops leading;
// its count of active items falls to 0 when none is left.
func TestItemMetricsFollowTheLeader(t *testing.T) {
	w := newWorld(t)
	w.fill("m", 20, topics.AdmissionPolicy{RatePerSecond: 100, MaxActive: 3, SessionTTLSeconds: 60})
	reg := prometheus.NewRegistry()
	s := New(w.rdb, w.prod, Options{Tick: 20 * time.Millisecond, LockExpiry: 2 * time.Second}, reg, zaptest.NewLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	per := s.m.perItem
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(per.active.WithLabelValues("m")) == 3
	}, 20*time.Second, 10*time.Millisecond)
	assert.Equal(t, 17.0, testutil.ToFloat64(per.waiting.WithLabelValues("m")), "maxActive 3 of 20: 17 wait")
	assert.Equal(t, 3.0, testutil.ToFloat64(per.admitted.WithLabelValues("m")))
	assert.Equal(t, 1.0, testutil.ToFloat64(s.m.items))
	require.NoError(t, w.rdb.SRem(ctx, queue.ActiveItems, "m").Err()) // the line is no longer active
	require.Eventually(t, func() bool { return testutil.ToFloat64(s.m.items) == 0 }, 20*time.Second, 10*time.Millisecond,
		"no active item left: the replica's count says 0, not its last tick's 1")
	cancel()
	require.NoError(t, <-done)
	assert.Zero(t, testutil.CollectAndCount(per.waiting), "a replica that stopped leading exports no line figures")
	assert.Equal(t, 3.0, testutil.ToFloat64(per.admitted.WithLabelValues("m")), "counters stay")
}

// A steered item's gauges go with the leadership of its shard: a replica
// that stopped leading exports no signal age or pin of its last step, which
// max by (item) would otherwise read beside the new leader's (for ever,
// WaitroomSteerSignalMissing with +Inf).
func TestSteerMetricsFollowTheLeader(t *testing.T) {
	w := newWorld(t)
	w.fill("paced", 20, topics.AdmissionPolicy{RatePerSecond: 5, SessionTTLSeconds: 60, MinRate: 1, MaxRate: 10,
		Steer: &topics.SteerPolicy{TargetP95Ms: 300}})
	reg := prometheus.NewRegistry()
	s := New(w.rdb, w.prod, Options{Tick: 20 * time.Millisecond, LockExpiry: 2 * time.Second,
		Steer: SteerOptions{Every: 20 * time.Millisecond}}, reg, zaptest.NewLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	m := s.steer.m
	require.Eventually(t, func() bool {
		return testutil.CollectAndCount(m.signalAge) == 1
	}, 20*time.Second, 10*time.Millisecond, "the leader exports the item's signal age")
	cancel()
	require.NoError(t, <-done)
	assert.Zero(t, testutil.CollectAndCount(m.signalAge), "a replica that stopped leading exports no signal age")
	assert.Zero(t, testutil.CollectAndCount(m.pinned), "nor a pin")
}

type itemMap map[string]topics.ItemState

func (m itemMap) All() map[string]topics.ItemState { return m }

func TestPolicyCollector(t *testing.T) {
	p := topics.AdmissionPolicy{RatePerSecond: 5, MaxActive: 50, SessionTTLSeconds: 60}
	paused := p
	paused.Paused = true
	c := PolicyCollector(itemMap{
		"open":     {ItemID: "open", Enabled: true, Stock: -1, Policy: p},
		"paused":   {ItemID: "paused", Enabled: true, Stock: -1, Policy: paused},
		"closed":   {ItemID: "closed", Enabled: false, Stock: -1, Policy: p},
		"sold-out": {ItemID: "sold-out", Enabled: true, Stock: 0, Policy: p},
	})
	want := `# HELP waitroom_item_rate_per_second An item's admission rate as set (0 while paused, disabled or sold out).
# TYPE waitroom_item_rate_per_second gauge
waitroom_item_rate_per_second{item="closed"} 0
waitroom_item_rate_per_second{item="open"} 5
waitroom_item_rate_per_second{item="paused"} 0
waitroom_item_rate_per_second{item="sold-out"} 0
# HELP waitroom_item_max_active An item's most live admissions at once, as set.
# TYPE waitroom_item_max_active gauge
waitroom_item_max_active{item="closed"} 50
waitroom_item_max_active{item="open"} 50
waitroom_item_max_active{item="paused"} 50
waitroom_item_max_active{item="sold-out"} 50
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "waitroom_item_rate_per_second", "waitroom_item_max_active"))

	steered := p
	steered.MaxRate, steered.Steer = 10, &topics.SteerPolicy{TargetP95Ms: 300}
	c = PolicyCollector(itemMap{"plain": {ItemID: "plain", Policy: p}, "paced": {ItemID: "paced", Policy: steered}})
	want = `# HELP waitroom_item_steered 1 when the item's policy asks the steering controller to pace it by the site's signal.
# TYPE waitroom_item_steered gauge
waitroom_item_steered{item="paced"} 1
waitroom_item_steered{item="plain"} 0
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), "waitroom_item_steered"))
}
