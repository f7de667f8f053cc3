package liveness_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/liveness"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"go.uber.org/zap"
)

// Polls reach Redis at their own time, held streams at the flush's, and only
// for tracked items; a failed flush keeps them for the next one.
func TestFlush(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	tr := liveness.New(queue.New(rdb), time.Hour, func(item string) bool { return item != "off" }, zap.NewNop())
	t0 := time.UnixMilli(1_000_000)
	tr.Touch("a", "t1", "u1", t0)
	tr.Touch("a", "t1", "u1", t0.Add(-time.Second)) // older: ignored
	tr.Touch("a", "t2", "u2", t0.Add(time.Second))
	tr.Touch("off", "t9", "u9", t0)
	release := tr.Hold("b", "t3", "u3")
	before := time.Now().UnixMilli()
	require.NoError(t, tr.Flush(ctx))
	score := func(item, member string) float64 {
		s, err := rdb.ZScore(ctx, queue.KeysFor(item).Seen, member).Result()
		require.NoError(t, err, "%s %s", item, member)
		return s
	}
	assert.EqualValues(t, 1_000_000, score("a", "t1 u1"))
	assert.EqualValues(t, 1_001_000, score("a", "t2 u2"))
	assert.GreaterOrEqual(t, score("b", "t3 u3"), float64(before))
	assert.Zero(t, rdb.Exists(ctx, queue.KeysFor("off").Seen).Val(), "an item without an idle timeout keeps nothing")

	// The held stream counts at each flush until released.
	require.NoError(t, rdb.Del(ctx, queue.KeysFor("b").Seen).Err())
	require.NoError(t, tr.Flush(ctx))
	assert.GreaterOrEqual(t, score("b", "t3 u3"), float64(before))
	release()
	release() // twice is once
	require.NoError(t, rdb.Del(ctx, queue.KeysFor("b").Seen).Err())
	require.NoError(t, tr.Flush(ctx), "the release is the last sign")
	assert.GreaterOrEqual(t, score("b", "t3 u3"), float64(before))
	require.NoError(t, rdb.Del(ctx, queue.KeysFor("b").Seen).Err())
	require.NoError(t, tr.Flush(ctx))
	assert.Zero(t, rdb.Exists(ctx, queue.KeysFor("b").Seen).Val(), "released: no more signs")

	// Redis refuses the flush: the signs wait for the next one.
	tr.Touch("c", "t4", "u4", t0)
	require.NoError(t, rdb.Set(ctx, queue.KeysFor("c").Seen, "corrupt", 0).Err())
	require.Error(t, tr.Flush(ctx))
	require.NoError(t, rdb.Del(ctx, queue.KeysFor("c").Seen).Err())
	require.NoError(t, tr.Flush(ctx))
	assert.EqualValues(t, 1_000_000, score("c", "t4 u4"))
}

// BenchmarkTouch is what a status read of an item with an idle timeout adds
// on the api's hot path: one map write under the tracker's lock.
func BenchmarkTouch(b *testing.B) {
	tr := liveness.New(nil, time.Hour, func(string) bool { return true }, zap.NewNop())
	toks := make([]string, 100_000)
	for i := range toks {
		toks[i] = "tok" + strconv.Itoa(i)
	}
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			tr.Touch("item", toks[i%len(toks)], "user", now)
			i++
		}
	})
}
