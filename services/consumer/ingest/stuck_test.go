package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"go.uber.org/zap"
)

// A rebuilt item whose partition passed over a record at or after the
// rebuild's end, and got no batch since, is marked lost again once it has
// waited stuckAfter (so it is rebuilt past that record); one rebuilt a
// moment ago, or with nothing passed over after its end, is left to the
// consumer and the rebuild.
func TestRelostStuckRebuildsAnItemItsPartitionNeverFinished(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	now := time.Now()
	long := now.Add(-time.Minute).UnixMilli()
	ends := map[string]int64{"0": 10}
	for it, li := range map[string]view.LostItem{
		"stuck":  {Since: long, State: view.ItemRebuilt, Ends: ends, Rebuilt: long},
		"recent": {Since: long, State: view.ItemRebuilt, Ends: ends, Rebuilt: now.UnixMilli()},
		"before": {Since: long, State: view.ItemRebuilt, Ends: ends, Rebuilt: long},
		"lost":   {Since: long, State: view.ItemLost},
	} {
		require.NoError(t, view.SetLost(ctx, rdb, it, li))
	}
	require.NoError(t, view.Skipped(ctx, rdb, "stuck", 0, 12))  // after the end
	require.NoError(t, view.Skipped(ctx, rdb, "recent", 0, 12)) // after the end, but just rebuilt
	require.NoError(t, view.Skipped(ctx, rdb, "before", 0, 9))  // before the end: in the rebuild
	require.NoError(t, view.Skipped(ctx, rdb, "lost", 0, 12))
	_, lost, err := view.ReadItems(ctx, rdb)
	require.NoError(t, err)

	n, err := relostStuck(ctx, rdb, view.Status{Trusted: true, Lost: lost}, stuckAfter(250*time.Millisecond), now, zap.NewNop())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	after, _, err := view.Lost(ctx, rdb, "stuck", "recent", "before", "lost")
	require.NoError(t, err)
	require.Equal(t, view.ItemLost, after["stuck"].State, "rebuilt again")
	require.Equal(t, long, after["stuck"].Since, "lost since the first loss")
	require.Equal(t, view.ItemRebuilt, after["recent"].State)
	require.Equal(t, view.ItemRebuilt, after["before"].State)
	require.Equal(t, view.ItemLost, after["lost"].State)
}
