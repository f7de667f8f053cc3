package ingest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/services/consumer/consume"
	"go.uber.org/zap"
)

func batch(from int64, keys ...string) []*kgo.Record {
	out := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		out[i] = &kgo.Record{Key: []byte(k), Partition: 0, Offset: from + int64(i)}
	}
	return out
}

func keysOf(recs []*kgo.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Key)
	}
	return out
}

// The gate per item: a lost item's records are passed over (the last
// noted); once the item is rebuilt up to an end before what was passed
// over, the partition is rewound to that end; consumed again from there,
// the item is trusted and its records applied. An item new to the view is
// registered before its first record.
func TestGateItemsPassesOverALostItemThenRewinds(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	require.NoError(t, view.SetReady(ctx, rdb, "g1", nil, time.Now()))
	w := view.NewWatcher(rdb, view.Options{}, nil, zap.NewNop())
	w.Check(ctx)
	got, err := gateItems(ctx, rdb, w, 0, batch(0, "lost", "kept"))
	require.NoError(t, err)
	require.Equal(t, []string{"lost", "kept"}, keysOf(got))
	reg, _, err := view.ReadItems(ctx, rdb)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"lost": "g1", "kept": "g1"}, reg, "both registered at their first record")

	w.Check(ctx)
	require.NoError(t, rdb.Del(ctx, view.ItemKey("lost")).Err()) // its node restarted empty
	// Before the watcher's next check: the batch reads the markers itself.
	got, err = gateItems(ctx, rdb, w, 0, batch(10, "lost", "kept", "lost", "kept"))
	require.NoError(t, err)
	require.Equal(t, []string{"kept", "kept"}, keysOf(got), "the lost item's records are not applied")
	_, skipped, err := view.Lost(ctx, rdb, "lost")
	require.NoError(t, err)
	require.Equal(t, view.Skip{Partition: 0, Offset: 12}, skipped["lost"])
	require.Contains(t, w.Check(ctx).Lost, "lost")

	// Rebuilt up to offset 11: what was passed over at 12 is after it.
	li := view.LostItem{Since: time.Now().UnixMilli(), State: view.ItemRebuilt, Reason: "test", Ends: map[string]int64{"0": 11}}
	require.NoError(t, view.SetLost(ctx, rdb, "lost", li))
	w.Check(ctx)
	_, err = gateItems(ctx, rdb, w, 0, batch(14, "kept"))
	var rw *consume.Rewind
	require.True(t, errors.As(err, &rw), "got %v, want a rewind", err)
	require.Equal(t, consume.Rewind{Partition: 0, Offset: 11}, *rw)
	_, err = gateItems(ctx, rdb, w, 1, batch(14, "other")) // another partition: none of its business
	require.NoError(t, err)

	got, err = gateItems(ctx, rdb, w, 0, batch(11, "kept", "lost", "kept", "lost"))
	require.NoError(t, err)
	require.Equal(t, []string{"kept", "lost", "kept", "lost"}, keysOf(got), "consumed again from the end: applied")
	lost, skipped, err := view.Lost(ctx, rdb, "lost")
	require.NoError(t, err)
	require.Empty(t, lost, "trusted again")
	require.Empty(t, skipped)
}

// An item's config change waits while the item is lost (the rebuild could
// overwrite it with the older one it read), then is applied; an item new to
// the view is registered at its first config.
func TestWaitViewHoldsALostItemsConfig(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	require.NoError(t, view.SetReady(ctx, rdb, "g1", nil, time.Now()))
	w := view.NewWatcher(rdb, view.Options{}, nil, zap.NewNop())
	w.Check(ctx)
	applied := 0
	h := WaitView(rdb, w, func(context.Context, int32, []*kgo.Record) error { applied++; return nil })
	require.NoError(t, h(ctx, 0, batch(0, "a")))
	require.Equal(t, 1, applied)
	w.Check(ctx)
	require.Contains(t, w.Status().Registry, "a")
	require.NoError(t, rdb.Del(ctx, view.ItemKey("a")).Err())
	w.Check(ctx)
	require.ErrorIs(t, h(ctx, 0, batch(1, "a")), errItemLost)
	require.Equal(t, 1, applied, "applied while lost")
	require.NoError(t, view.Found(ctx, rdb, "a"))
	require.NoError(t, rdb.Set(ctx, view.ItemKey("a"), "g1", 0).Err())
	w.Check(ctx)
	require.NoError(t, h(ctx, 0, batch(1, "a")))
	require.Equal(t, 2, applied)
}
