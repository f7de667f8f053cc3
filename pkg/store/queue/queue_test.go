package queue_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

func reg(item, tok, user string, off int64) queue.Op {
	return queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: tok, UserID: user, Partition: 0, Offset: off}
}

func TestLineOrderDedupeLeave(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	require.NoError(t, l.Load(ctx))

	res, err := l.Apply(ctx, []queue.Op{
		reg("i1", "t1", "alice", 0),
		reg("i1", "t2", "bob", 1),
		reg("i1", "t3", "alice", 2), // alice again: keeps her first place
		reg("i1", "t4", "carol", 3),
	})
	require.NoError(t, err)
	assert.Equal(t, []queue.Result{
		{Outcome: queue.Added, Seq: 1, TokenID: "t1"},
		{Outcome: queue.Added, Seq: 2, TokenID: "t2"},
		{Outcome: queue.Duplicate, Seq: 1, TokenID: "t1"},
		{Outcome: queue.Added, Seq: 3, TokenID: "t4"},
	}, res)
	ids, err := l.Waiting(ctx, "i1", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"t1", "t2", "t4"}, ids)

	// alice's key reads her place; her second token reads DUPLICATE, naming
	// the token that holds the place, never the place itself.
	st, err := l.Status(ctx, "i1", "alice", "", 0, 2)
	require.NoError(t, err)
	assert.Equal(t, line.Status{State: line.Waiting, Position: 1, WaitingTotal: 3, Seq: 1, TokenID: "t1"}, st)
	st, err = l.Status(ctx, "i1", "alice", "t3", 0, 2)
	require.NoError(t, err)
	assert.Equal(t, line.Status{State: line.Duplicated, TokenID: "t1"}, st)

	// A leave through the second token leaves nothing: the place is t1's.
	// alice leaves through t1 (which then reads LEFT), then registers
	// again: she goes to the back.
	res, err = l.Apply(ctx, []queue.Op{
		{Kind: queue.OpLeave, ItemID: "i1", TokenID: "t3", UserID: "alice", Offset: 4},
		{Kind: queue.OpLeave, ItemID: "i1", TokenID: "t1", UserID: "alice", Offset: 5},
	})
	require.NoError(t, err)
	assert.Equal(t, queue.NotInLine, res[0].Outcome)
	assert.Equal(t, queue.Left, res[1].Outcome)
	assert.Equal(t, "t1", res[1].TokenID)
	st, err = l.Status(ctx, "i1", "alice", "t1", 0, 5)
	require.NoError(t, err)
	assert.Equal(t, line.Status{State: line.LeftLine, TokenID: "t1"}, st)
	res, err = l.Apply(ctx, []queue.Op{reg("i1", "t5", "alice", 6)})
	require.NoError(t, err)
	assert.Equal(t, queue.Result{Outcome: queue.Added, Seq: 4, TokenID: "t5"}, res[0])
	ids, err = l.Waiting(ctx, "i1", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"t2", "t4", "t5"}, ids)

	st, err = l.Status(ctx, "i1", "alice", "t5", 0, 6)
	require.NoError(t, err)
	assert.Equal(t, line.Status{State: line.Waiting, Position: 3, WaitingTotal: 3, Seq: 4, TokenID: "t5"}, st)
	// The key keeps one place: alice's other tokens (t1's left, t3 never
	// had one) read DUPLICATE naming t5, for a proven user to resume.
	for _, tok := range []string{"t1", "t3"} {
		st, err = l.Status(ctx, "i1", "alice", tok, 0, 6)
		require.NoError(t, err)
		assert.Equal(t, line.Status{State: line.Duplicated, TokenID: "t5"}, st, tok)
	}
}

func TestLineReplayIsNoop(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	ops := []queue.Op{reg("i", "a", "ua", 10), reg("i", "b", "ub", 11),
		{Kind: queue.OpLeave, ItemID: "i", TokenID: "a", UserID: "ua", Offset: 12}}
	_, err := l.Apply(ctx, ops) // scripts not loaded yet: NOSCRIPT path loads them
	require.NoError(t, err)
	// A rebalance redelivers the whole batch: nothing may change.
	res, err := l.Apply(ctx, ops)
	require.NoError(t, err)
	for i, r := range res {
		assert.Equal(t, queue.Replay, r.Outcome, "op %d", i)
	}
	ids, err := l.Waiting(ctx, "i", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, ids)
	// The same records on another partition are other records (applied, not
	// a replay), but a token is placed once: a, which left, stays out (a
	// retried registration names its first try's token); a new token there
	// joins at the end.
	res, err = l.Apply(ctx, []queue.Op{{Kind: queue.OpRegister, ItemID: "i", TokenID: "a", UserID: "ua", Partition: 1, Offset: 0},
		{Kind: queue.OpRegister, ItemID: "i", TokenID: "c", UserID: "uc", Partition: 1, Offset: 1}})
	require.NoError(t, err)
	assert.Equal(t, queue.Duplicate, res[0].Outcome, "applied, not placed again")
	assert.Empty(t, res[0].TokenID, "no live place holds it")
	assert.Equal(t, queue.Added, res[1].Outcome)
	ids, err = l.Waiting(ctx, "i", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"b", "c"}, ids)
}

func TestStatusStates(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	_, err := l.Apply(ctx, []queue.Op{
		reg("s", "t1", "u1", 0),
		reg("s", "t2", "u2", 1),
		{Kind: queue.OpLeave, ItemID: "s", TokenID: "t2", UserID: "u2", Offset: 2},
		{Kind: queue.OpMark, ItemID: "s", Offset: 3}, // u3's record went to the DLQ
	})
	require.NoError(t, err)
	cases := []struct {
		user string
		off  int64
		want line.State
	}{
		{"u1", 0, line.Waiting},
		{"u2", 1, line.LeftLine},
		{"u3", 3, line.Rejected},
		{"u4", 4, line.Pending}, // produced, not applied yet
		{"u2", 9, line.Pending}, // u2 registered again, not applied yet
	}
	for _, c := range cases {
		st, err := l.Status(ctx, "s", c.user, "", 0, c.off)
		require.NoError(t, err)
		assert.Equal(t, c.want, st.State, "%s@%d", c.user, c.off)
	}
}

func TestApplyItemVersionCheck(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	s := topics.ItemState{V: 1, ItemID: "tix", Name: "Tickets", Stock: 10, Enabled: true,
		Policy: topics.AdmissionPolicy{RatePerSecond: 2.5, MaxActive: 100, SessionTTLSeconds: 300}, Version: 2, UpdatedAt: 1}
	ok, err := l.ApplyItem(ctx, s)
	require.NoError(t, err)
	assert.True(t, ok)
	old := s
	old.Version, old.Stock = 1, 99
	ok, err = l.ApplyItem(ctx, old)
	require.NoError(t, err)
	assert.False(t, ok, "an older version must not overwrite")
	got, found, err := l.Item(ctx, "tix")
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, s, got)
	require.NoError(t, l.DeleteItem(ctx, "tix"))
	_, found, err = l.Item(ctx, "tix")
	require.NoError(t, err)
	assert.False(t, found)
}

func TestApplyManyItemsIndependent(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	var ops []queue.Op
	for i := 0; i < 300; i++ {
		item := fmt.Sprintf("item-%d", i%3)
		ops = append(ops, queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: fmt.Sprintf("t%d", i),
			UserID: fmt.Sprintf("u%d", i), Partition: int32(i % 3), Offset: int64(i / 3)})
	}
	_, err := l.Apply(ctx, ops)
	require.NoError(t, err)
	for j := 0; j < 3; j++ {
		ids, err := l.Waiting(ctx, fmt.Sprintf("item-%d", j), 0)
		require.NoError(t, err)
		require.Len(t, ids, 100)
		for k, tok := range ids {
			assert.Equal(t, fmt.Sprintf("t%d", k*3+j), tok)
		}
	}
}

func TestApplyTellsRecordErrorsFromOutages(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	rdb := srv.Client()
	l := queue.New(rdb)
	require.NoError(t, rdb.Set(ctx, queue.KeysFor("bad").Users, "not a hash", 0).Err())
	res, err := l.Apply(ctx, []queue.Op{reg("ok", "t1", "u1", 0), reg("bad", "t2", "u2", 1), reg("ok", "t3", "u3", 2)})
	require.NoError(t, err, "one corrupt key fails its op, not the batch")
	assert.Equal(t, queue.Added, res[0].Outcome)
	assert.ErrorContains(t, res[1].Err, "WRONGTYPE")
	assert.Equal(t, queue.Added, res[2].Outcome)

	srv.Stop() // an outage is the batch's error, to be retried
	_, err = l.Apply(ctx, []queue.Op{reg("ok", "t4", "u4", 3)})
	require.Error(t, err)
	srv.Start()
	res, err = l.Apply(ctx, []queue.Op{reg("ok", "t4", "u4", 3)}) // a fresh server: scripts reload by themselves
	require.NoError(t, err)
	assert.Equal(t, queue.Added, res[0].Outcome)
}

func TestRewindLetsRefusedOpsRunAgain(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	require.NoError(t, rdb.Set(ctx, queue.KeysFor("r").Users, "corrupt", 0).Err())
	res, err := l.Apply(ctx, []queue.Op{reg("r", "t1", "u1", 5)})
	require.NoError(t, err)
	require.Error(t, res[0].Err)
	applied, err := rdb.HGet(ctx, queue.KeysFor("r").Applied, "0").Result()
	require.ErrorIs(t, err, redis.Nil, "a refused op leaves nothing behind, not even its offset: %q", applied)
	require.NoError(t, rdb.Del(ctx, queue.KeysFor("r").Users).Err()) // an operator fixes the key
	res, err = l.Apply(ctx, []queue.Op{reg("r", "t2", "u2", 6)})     // the batch's next op passes
	require.NoError(t, err)
	require.Equal(t, queue.Added, res[0].Outcome)
	res, err = l.Apply(ctx, []queue.Op{reg("r", "t1", "u1", 5)})
	require.NoError(t, err)
	assert.Equal(t, queue.Replay, res[0].Outcome, "without a rewind the refused op is a replay")

	ok, err := l.Rewind(ctx, "r", 0, 5, 6)
	require.NoError(t, err)
	require.True(t, ok)
	res, err = l.Apply(ctx, []queue.Op{reg("r", "t1", "u1", 5), reg("r", "t2", "u2", 6)})
	require.NoError(t, err)
	assert.Equal(t, queue.Added, res[0].Outcome)
	assert.Equal(t, queue.Duplicate, res[1].Outcome)

	// A write beyond the batch owns the offset: no rewind.
	_, err = l.Apply(ctx, []queue.Op{reg("r", "t9", "u9", 50)})
	require.NoError(t, err)
	ok, err = l.Rewind(ctx, "r", 0, 5, 6)
	require.NoError(t, err)
	assert.False(t, ok)
}
