package queue_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/queue"
	"github.com/waitroom/waitroom/pkg/testenv"
)

func TestCountersReadTheStatsHash(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	l := queue.New(rdb)
	c, err := l.Counters(ctx, "c")
	require.NoError(t, err)
	assert.Empty(t, c.Counts, "nothing counted yet")
	assert.Zero(t, c.PacedSinceMs)

	k := queue.KeysFor("c")
	require.NoError(t, rdb.HSet(ctx, k.Stats, "abandoned", 7, "rejected", 2).Err())
	require.NoError(t, rdb.RPush(ctx, k.Paced, "1700000000000:3", "1700000001000:1").Err())
	c, err = l.Counters(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"abandoned": 7, "rejected": 2}, c.Counts)
	assert.Equal(t, int64(1700000000000), c.PacedSinceMs)
}
