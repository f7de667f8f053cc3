package promote

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/topics"
)

// TestEpochNeverGoesBackwardsWhenItsCounterIsLost: the master holding the
// epoch counter restarts empty (the key is gone, the floor beside the
// view's marker is not); the next leader's epoch is still above every epoch
// taken before, and it admits (a fence gone backwards would be refused by
// every item's own epoch, and leadership would churn until it caught up).
func TestEpochNeverGoesBackwardsWhenItsCounterIsLost(t *testing.T) {
	w := newWorld(t)
	w.fill("e", 20, topics.AdmissionPolicy{RatePerSecond: 1000, SessionTTLSeconds: 60})
	ctx := context.Background()
	r := w.replica(Options{Tick: 100 * time.Millisecond, LockExpiry: time.Second})
	var last int64
	for range 5 {
		e, err := r.ep.next(ctx)
		require.NoError(t, err)
		require.Greater(t, e, last)
		last = e
	}
	require.NoError(t, w.rdb.Del(ctx, EpochKey).Err()) // its node restarted empty

	// Another replica (no memory of the epochs taken) leads next.
	nu := w.replica(Options{Tick: 100 * time.Millisecond, LockExpiry: time.Second})
	l := nu.acquire(ctx, 0)
	require.NotNil(t, l, "the new replica leads")
	require.Greater(t, l.epoch, last, "the fence went backwards")
	require.NoError(t, nu.tick(ctx, l.epoch, l))
	st, err := w.line.Stats(ctx, "e")
	require.NoError(t, err)
	require.Positive(t, st.Admitted, "the new leader admits")

	// Both the counter and its floor lost at once (one master held both):
	// the process's own memory still keeps it above what it took.
	require.NoError(t, w.rdb.Del(ctx, EpochKey).Err())
	require.NoError(t, w.rdb.Del(ctx, EpochFloorKey).Err())
	e, err := nu.ep.next(ctx)
	require.NoError(t, err)
	require.Greater(t, e, l.epoch)
}
