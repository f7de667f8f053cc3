package linesnap_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/linesnap"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// fill builds a line of item on rdb with every state: 10 registered (u0..u9),
// 3 admitted at t0 with a 60 s session, u3 then completes, u5 leaves.
func fill(t *testing.T, rdb redis.UniversalClient, item string, t0 time.Time) {
	t.Helper()
	ctx := context.Background()
	l := queue.New(rdb)
	require.NoError(t, l.Load(ctx))
	_, err := l.ApplyItem(ctx, topics.ItemState{V: 1, ItemID: item, Name: item, Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 3, MaxActive: 100, SessionTTLSeconds: 60}})
	require.NoError(t, err)
	var ops []queue.Op
	for i := range 10 {
		ops = append(ops, queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: fmt.Sprint("t", i), UserID: fmt.Sprint("u", i),
			Partition: int32(i % 2), Offset: int64(i)})
	}
	_, err = l.Apply(ctx, ops)
	require.NoError(t, err)
	tick, err := l.Promote(ctx, item, 1, t0, time.Second)
	require.NoError(t, err)
	require.Equal(t, 3, tick.Admitted) // t0, t1, t2
	// t3 is admitted on the next tick, then completes; u5 leaves.
	tick, err = l.Promote(ctx, item, 1, t0.Add(time.Second), time.Second)
	require.NoError(t, err)
	require.Equal(t, 3, tick.Admitted) // t3, t4, t5
	ok, err := l.Complete(ctx, item, "t3", "u3")
	require.NoError(t, err)
	require.True(t, ok)
	_, err = l.Apply(ctx, []queue.Op{{Kind: queue.OpLeave, ItemID: item, TokenID: "t5", UserID: "u5", Partition: 1, Offset: 11}})
	require.NoError(t, err)
}

func TestSnapshotOfEveryState(t *testing.T) {
	rdb := testenv.Redis(t)
	t0 := time.UnixMilli(1_700_000_000_000)
	fill(t, rdb, "show", t0)

	// 30 s after the first tick: everyone admitted is still inside.
	s, err := linesnap.Take(context.Background(), rdb, "show", t0.Add(30*time.Second))
	require.NoError(t, err)
	exp0, exp1 := t0.Add(60*time.Second).UnixMilli(), t0.Add(61*time.Second).UnixMilli()
	assert.Equal(t, []linesnap.Entry{
		{Token: "t0", User: "u0", State: line.Admitted, ExpiresAtMs: exp0},
		{Token: "t1", User: "u1", State: line.Admitted, ExpiresAtMs: exp0},
		{Token: "t2", User: "u2", State: line.Admitted, ExpiresAtMs: exp0},
		{Token: "t3", User: "u3", State: line.Completed},
		{Token: "t4", User: "u4", State: line.Admitted, ExpiresAtMs: exp1},
		{Token: "t5", User: "u5", State: line.LeftLine},
		{Token: "t6", User: "u6", State: line.Waiting, Seq: 7, Position: 1},
		{Token: "t7", User: "u7", State: line.Waiting, Seq: 8, Position: 2},
		{Token: "t8", User: "u8", State: line.Waiting, Seq: 9, Position: 3},
		{Token: "t9", User: "u9", State: line.Waiting, Seq: 10, Position: 4},
	}, s.Entries)
	assert.Equal(t, int64(10), s.Seq)
	assert.Equal(t, int64(6), s.Head)
	assert.Equal(t, map[string]int64{"0": 8, "1": 11}, s.Applied)

	// 60.5 s after: the first three admissions ended (a tick has not dropped them yet).
	s, err = linesnap.Take(context.Background(), rdb, "show", t0.Add(60500*time.Millisecond))
	require.NoError(t, err)
	for _, e := range s.Entries[:3] {
		assert.Equal(t, linesnap.Entry{Token: e.Token, User: e.User, State: line.Gone}, e)
	}
	assert.Equal(t, line.Admitted, s.Entries[4].State)
}

func TestWriteReadIsCanonical(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	a, b := testenv.Redis(t), testenv.Redis(t)
	fill(t, a, "x", t0)
	fill(t, b, "x", t0) // the same history on another Redis

	sa, err := linesnap.Take(context.Background(), a, "x", t0.Add(time.Second))
	require.NoError(t, err)
	sb, err := linesnap.Take(context.Background(), b, "x", t0.Add(time.Second))
	require.NoError(t, err)
	var ba, bb bytes.Buffer
	require.NoError(t, sa.Write(&ba))
	require.NoError(t, sb.Write(&bb))
	assert.Equal(t, ba.String(), bb.String(), "the same line must give the same bytes")
	assert.Empty(t, linesnap.Diff(sa, sb))

	back, err := linesnap.Read(bytes.NewReader(ba.Bytes()))
	require.NoError(t, err)
	assert.Equal(t, sa, back)

	// A cut file is refused, not read as a shorter line.
	cut := ba.Bytes()[:bytes.LastIndexByte(ba.Bytes()[:ba.Len()-1], '\n')+1]
	_, err = linesnap.Read(bytes.NewReader(cut))
	require.ErrorContains(t, err, "cut short")
	_, err = linesnap.Read(bytes.NewReader([]byte(`{"format":"other"}` + "\n")))
	require.ErrorContains(t, err, "format")
}

func TestDiffNamesEveryDifference(t *testing.T) {
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_000)
	rdb := testenv.Redis(t)
	fill(t, rdb, "d", t0)
	before, err := linesnap.Take(ctx, rdb, "d", t0.Add(time.Second))
	require.NoError(t, err)

	// What a wrong rebuild could do: lose a waiting person, move another,
	// change an expiry, revive a left one, forget an offset.
	k := queue.KeysFor("d")
	require.NoError(t, rdb.ZRem(ctx, k.Waiting, "t9").Err())
	require.NoError(t, rdb.HDel(ctx, k.Users, "u9").Err())
	require.NoError(t, rdb.ZAdd(ctx, k.Waiting, redis.Z{Score: 11, Member: "t7"}).Err())
	require.NoError(t, rdb.ZAdd(ctx, k.Admitted, redis.Z{Score: float64(t0.Add(99 * time.Second).UnixMilli()), Member: "t4"}).Err())
	require.NoError(t, rdb.HSet(ctx, k.Users, "u5", "t5").Err())
	require.NoError(t, rdb.ZAdd(ctx, k.Waiting, redis.Z{Score: 5, Member: "t5"}).Err())
	require.NoError(t, rdb.HSet(ctx, k.Applied, "1", "9").Err())
	require.NoError(t, rdb.Set(ctx, k.Seq, 11, 0).Err())
	after, err := linesnap.Take(ctx, rdb, "d", t0.Add(time.Second))
	require.NoError(t, err)

	d := linesnap.Diff(before, after)
	assert.Equal(t, []string{
		"seq: 10 -> 11",
		"applied[1]: 11 -> 9",
		"token t4: ADMITTED expiresAt=2023-11-14T22:14:21.000Z user=u4 -> ADMITTED expiresAt=2023-11-14T22:14:59.000Z user=u4",
		"token t5: LEFT user=u5 -> WAITING seq=5 position=1 user=u5",
		"token t6: WAITING seq=7 position=1 user=u6 -> WAITING seq=7 position=2 user=u6",
		"token t7: WAITING seq=8 position=2 user=u7 -> WAITING seq=11 position=4 user=u7",
		"token t9: only in A (WAITING seq=10 position=4 user=u9)",
	}, d)
}

func TestTokenWithoutUserIsShown(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	require.NoError(t, rdb.ZAdd(ctx, queue.KeysFor("o").Waiting, redis.Z{Score: 1, Member: "orphan"}).Err())
	s, err := linesnap.Take(ctx, rdb, "o", time.Time{})
	require.NoError(t, err)
	assert.Equal(t, []linesnap.Entry{{Token: "orphan", State: line.Waiting, Seq: 1, Position: 1}}, s.Entries)
}

// TestLargeLine takes a line bigger than one SCAN step (and than Lua's stack).
func TestLargeLine(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	require.NoError(t, l.Load(ctx))
	const n = 25_000
	ops := make([]queue.Op, n)
	for i := range ops {
		ops[i] = queue.Op{Kind: queue.OpRegister, ItemID: "big", TokenID: fmt.Sprintf("t%06d", i), UserID: fmt.Sprint("u", i), Offset: int64(i)}
	}
	for i := 0; i < n; i += 5000 {
		_, err := l.Apply(ctx, ops[i:i+5000])
		require.NoError(t, err)
	}
	s, err := linesnap.Take(ctx, rdb, "big", time.Time{})
	require.NoError(t, err)
	require.Len(t, s.Entries, n)
	for i, e := range s.Entries {
		require.Equal(t, linesnap.Entry{Token: fmt.Sprintf("t%06d", i), User: fmt.Sprint("u", i), State: line.Waiting, Seq: int64(i + 1), Position: int64(i + 1)}, e)
	}
}

func TestSnapshotOfAPreQueue(t *testing.T) {
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	ctx := context.Background()
	_, err := l.Apply(ctx, []queue.Op{
		{Kind: queue.OpRegister, ItemID: "sale", TokenID: "p1", UserID: "u1", Offset: 0, Window: 5000},
		{Kind: queue.OpRegister, ItemID: "sale", TokenID: "l1", UserID: "u2", Offset: 1},
	})
	require.NoError(t, err)
	s, err := linesnap.Take(ctx, rdb, "sale", time.Now())
	require.NoError(t, err)
	assert.Equal(t, []linesnap.Entry{
		{Token: "l1", User: "u2", State: line.Late},
		{Token: "p1", User: "u1", State: line.Pooled, Window: 5000},
	}, s.Entries)
}
