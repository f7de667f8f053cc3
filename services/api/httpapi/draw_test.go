package httpapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// Before a scheduled sale opens a registration is answered PRE_QUEUE with
// the countdown, its record carries the window, and its status says when
// the draw is due and how many are in it, read after read; once the draw
// placed it, the very next read answers its position (nothing kept in
// memory says PRE_QUEUE). In random mode the window is the current one's end.
func TestPreQueueAnswers(t *testing.T) {
	opensAt := time.Now().Add(time.Hour).UnixMilli()
	root := draw.Root([]byte("k"), "sale", "")
	commit := draw.Commit(root, 2)
	sale := item("sale")
	sale.OpensAt, sale.DrawCommit, sale.DrawRounds = opensAt, commit, 2
	lottery := item("lottery")
	lottery.Mode, lottery.DrawWindowSeconds, lottery.DrawCommit, lottery.DrawRounds = topics.ModeRandom, 30, strings.Repeat("b", 64), 5
	s := newAPI(t, sale, lottery)

	r, q := s.register("sale", "u1")
	assert.Equal(t, "PRE_QUEUE", r.Status)
	assert.Equal(t, opensAt, r.DrawAt)
	assert.Equal(t, opensAt, r.OpensAt)
	_, err := s.line.Apply(context.Background(), []queue.Op{{Kind: queue.OpRegister, ItemID: "sale", TokenID: q.TokenID,
		UserID: q.PlaceKey(), Partition: q.Partition, Offset: q.Offset, Window: r.DrawAt}})
	require.NoError(t, err)
	for range 3 {
		st := s.status("sale", r.Token)
		assert.Equal(t, "PRE_QUEUE", st.Status)
		assert.Equal(t, opensAt, st.DrawAt)
		assert.Equal(t, int64(1), st.InDraw)
		assert.Equal(t, int64(30_000), st.PollAfterMs, "far from the draw: the longest wait")
	}
	seed, _ := draw.Seed(root, 2, 1)
	_, err = s.line.Draw(context.Background(), queue.DrawOp{ItemID: "sale", Partition: q.Partition, Offset: q.Offset + 1,
		Window: opensAt, Round: 1, Seed: seed, Commit: commit})
	require.NoError(t, err)
	st := s.status("sale", r.Token)
	assert.Equal(t, "WAITING", st.Status)
	assert.Equal(t, int64(1), st.Position)
	assert.Zero(t, st.DrawAt)

	before := time.Now().UnixMilli()
	r, _ = s.register("lottery", "u1")
	assert.Equal(t, "PRE_QUEUE", r.Status)
	assert.Zero(t, r.OpensAt)
	assert.Zero(t, r.DrawAt%30_000)
	assert.Greater(t, r.DrawAt, before)
	assert.LessOrEqual(t, r.DrawAt, time.Now().UnixMilli()+30_000)
}
