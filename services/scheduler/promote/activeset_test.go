package promote

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// In a Redis Cluster the registry of items with a line (wr:items:active)
// lives on one master and each item's line on another. A master restarted
// empty with the registry on it, its items' lines untouched, must not stop
// the admissions of items nobody registers for any more: the scheduler
// ticks the items the view's own registry lists too, and writes them back.
func TestItemsTickedWhenTheActiveSetIsLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := newWorld(t)
	toks := w.fill("kept", 6, topics.AdmissionPolicy{RatePerSecond: 1000, MaxActive: 3, SessionTTLSeconds: 60})
	require.NoError(t, view.SetReady(ctx, w.rdb, "g1", nil, time.Now()))
	require.NoError(t, view.MarkItems(ctx, w.rdb, "g1", []string{"kept"}))
	// The active set's master restarted empty; nobody registers again.
	require.NoError(t, w.rdb.Del(ctx, queue.ActiveItems).Err())

	wt := view.NewWatcher(w.rdb, view.Options{Interval: 50 * time.Millisecond}, nil, zaptest.NewLogger(t))
	require.True(t, wt.Check(ctx).Trusted)
	require.Contains(t, wt.Status().Registry, "kept")
	s := w.replica(Options{Tick: 50 * time.Millisecond, LockExpiry: 2 * time.Second, View: wt})
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = wt.Run(rctx) })
	wg.Go(func() { _ = s.Run(rctx) })
	defer func() { stop(); wg.Wait() }()

	var admitted []string
	for _, ev := range w.admissions("kept", 3, 10*time.Second) {
		admitted = append(admitted, ev.Admitted...)
	}
	require.Equal(t, toks[:3], admitted, "the line goes on in order, within maxActive")
	require.Eventually(t, func() bool {
		ok, err := w.rdb.SIsMember(ctx, queue.ActiveItems, "kept").Result()
		return err == nil && ok
	}, 5*time.Second, 20*time.Millisecond, "the item is written back to the active set")
}
