package snapshot_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/snapshot"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// registerRange applies the registrations of offsets [from, to) of
// partition 0 to item's line, as the consumer does.
func registerRange(t *testing.T, l *queue.Line, item string, from, to int) {
	t.Helper()
	for lo := from; lo < to; lo += 1000 {
		ops := make([]queue.Op, 0, 1000)
		for i := lo; i < min(lo+1000, to); i++ {
			ops = append(ops, queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: fmt.Sprintf("TOKEN%021d", i),
				UserID: fmt.Sprintf("user-%07d", i), Partition: 0, Offset: int64(i)})
		}
		_, err := l.Apply(context.Background(), ops)
		require.NoError(t, err)
	}
}

// A line of 10,000 entries or more is snapshotted again once as many
// records were applied to it since its last snapshot as that snapshot
// held, or ten intervals after it; a smaller line, or one this writer has
// no snapshot of, every round.
func TestDueOnceALinesWorthOfRecordsWasApplied(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	kc, err := kgo.NewClient(kgo.SeedBrokers(testenv.Kafka(t, 1)...))
	require.NoError(t, err)
	defer kc.Close()
	require.NoError(t, view.SetReady(ctx, rdb, "g1", nil, time.Now()))
	l := queue.New(rdb)
	require.NoError(t, l.Load(ctx))
	for _, it := range []string{"big", "small"} {
		_, err := l.ApplyItem(ctx, topics.ItemState{V: 1, ItemID: it, Name: it, Stock: -1, Enabled: true, Version: 1,
			Policy: topics.AdmissionPolicy{RatePerSecond: 2, SessionTTLSeconds: 3600}})
		require.NoError(t, err)
	}
	registerRange(t, l, "big", 0, 10_000)
	registerRange(t, l, "small", 0, 100)
	w := snapshot.NewWriter(rdb, kc, zap.NewNop())
	const every = time.Minute
	require.True(t, w.Due(ctx, "big", every, time.Now()), "no snapshot of it yet")
	h, err := w.Write(ctx, "big")
	require.NoError(t, err)
	require.Equal(t, 10_000, h.Entries)
	_, err = w.Write(ctx, "small")
	require.NoError(t, err)
	taken := time.UnixMilli(h.TakenAt)

	assert.False(t, w.Due(ctx, "big", every, taken.Add(every)), "nothing applied since")
	assert.True(t, w.Due(ctx, "small", every, taken.Add(every)), "a small line: every round")
	registerRange(t, l, "big", 10_000, 19_999)
	assert.False(t, w.Due(ctx, "big", every, taken.Add(every)), "9,999 records applied since, of 10,000")
	assert.True(t, w.Due(ctx, "big", every, taken.Add(10*every)), "ten intervals after the last")
	registerRange(t, l, "big", 19_999, 20_000)
	assert.True(t, w.Due(ctx, "big", every, taken.Add(every)), "10,000 records applied since")
	assert.True(t, snapshot.NewWriter(rdb, kc, zap.NewNop()).Due(ctx, "big", every, taken.Add(every)),
		"a writer without a snapshot of it")
}
