package promote

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

type idleItems map[string]topics.ItemState

func (m idleItems) Get(item string) (topics.ItemState, bool) { s, ok := m[item]; return s, ok }

// The sweep of the shard's leader publishes an abandon record for each
// waiting place idle past the timeout plus the flush grace, forgets those
// and the places no longer waiting, and leaves alone fresh places, items
// without a timeout, and everything while it leads nothing.
func TestSweepPublishesIdlePlaces(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	paused := topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60}
	idle := w.fill("idle", 5, paused)
	off := w.fill("off", 2, paused)
	res, err := w.line.Apply(ctx, []queue.Op{{Kind: queue.OpLeave, ItemID: "idle", TokenID: idle[3], UserID: "u3", Offset: 100}})
	require.NoError(t, err)
	require.Equal(t, queue.Left, res[0].Outcome)

	now := time.Now()
	old := now.Add(-12 * time.Second).UnixMilli() // past 10 s + 1 s of grace
	late := now.Add(-10500 * time.Millisecond).UnixMilli()
	seen := []queue.SeenAt{
		{Item: "idle", Member: queue.SeenMember(idle[0], "u0"), AtMs: old},
		{Item: "idle", Member: queue.SeenMember(idle[1], "u1"), AtMs: old},
		{Item: "idle", Member: queue.SeenMember(idle[2], "u2"), AtMs: now.UnixMilli()}, // fresh
		{Item: "idle", Member: queue.SeenMember(idle[3], "u3"), AtMs: old},             // left: only forgotten
		{Item: "idle", Member: queue.SeenMember(idle[4], "u4"), AtMs: late},            // within the grace
		{Item: "off", Member: queue.SeenMember(off[0], "u0"), AtMs: old},               // no timeout
	}
	require.NoError(t, w.line.MarkSeen(ctx, seen, true))
	items := idleItems{"idle": {ItemID: "idle", IdleTimeoutSeconds: 10}, "off": {ItemID: "off"}}

	s := w.replica(Options{Shards: 1, Tick: 50 * time.Millisecond})
	sw := NewSweeper(s, items, time.Second, time.Second, prometheus.NewRegistry(), zaptest.NewLogger(t))
	n, err := sw.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a replica that leads nothing sweeps nothing")

	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(rctx) }()
	defer func() { stop(); <-done }()
	require.Eventually(t, s.Leading, 10*time.Second, 10*time.Millisecond)

	n, err = sw.Sweep(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	members := func(item string) []string {
		m, err := w.rdb.ZRange(ctx, queue.KeysFor(item).Seen, 0, -1).Result()
		require.NoError(t, err)
		slices.Sort(m)
		return m
	}
	assert.Equal(t, []string{queue.SeenMember(idle[2], "u2"), queue.SeenMember(idle[4], "u4")}, members("idle"),
		"released and gone places forgotten; the fresh one and the one within the grace kept")
	assert.Equal(t, []string{queue.SeenMember(off[0], "u0")}, members("off"))

	cl, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.ConsumeTopics(topics.Registrations),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var got []topics.RegistrationEvent
	for len(got) < 2 && pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			ev, err := topics.DecodeRegistration(r.Value)
			require.NoError(t, err)
			assert.Equal(t, "idle", string(r.Key))
			got = append(got, ev)
		})
	}
	require.Len(t, got, 2)
	for i, ev := range got {
		assert.Equal(t, topics.KindAbandon, ev.Kind)
		assert.Equal(t, idle[i], ev.TokenID)
		assert.Equal(t, []string{"u0", "u1"}[i], ev.UserID)
	}

	n, err = sw.Sweep(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "published once")
}
