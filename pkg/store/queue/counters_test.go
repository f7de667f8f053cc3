package queue_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
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

// The api's refusal counts add up per item and code, and the console reads
// them back with how many wait for a draw.
func TestCountersAddRefusedAndPreQueued(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	l := queue.New(rdb)
	require.NoError(t, l.AddRefused(ctx, map[string]map[string]int64{
		"r1": {"BLOCKED": 2, "RATE_LIMITED": 5}, "r2": {"REGISTRATION_REJECTED": 1}}))
	require.NoError(t, l.AddRefused(ctx, map[string]map[string]int64{"r1": {"BLOCKED": 1}}))
	require.NoError(t, l.AddRefused(ctx, nil))
	_, err := l.Apply(ctx, []queue.Op{pooled("r1", "p1", "u1", 0, 1000), pooled("r1", "p2", "u2", 1, 1000), reg("r1", "l1", "u3", 2)})
	require.NoError(t, err)
	c, err := l.Counters(ctx, "r1")
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"BLOCKED": 3, "RATE_LIMITED": 5}, c.Refused)
	assert.Equal(t, int64(3), c.PreQueued, "two pooled, one late behind them")
	c, err = l.Counters(ctx, "r2")
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"REGISTRATION_REJECTED": 1}, c.Refused)
	assert.Zero(t, c.PreQueued)
}
