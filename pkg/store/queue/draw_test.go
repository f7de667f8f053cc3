package queue_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

func pooled(item, tok, user string, off, window int64) queue.Op {
	op := reg(item, tok, user, off)
	op.Window = window
	return op
}

// A pre-queue: pooled registers wait for the draw, a register without a
// window after the sale opened queues behind it, the draw places the pool in
// the seed's order (chunked: more than DrawChunk people) and then the late
// ones in record order; a second draw of the window changes nothing.
func TestDrawPlacesThePoolInSeedOrderThenTheLateOnes(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	const item, window, n = "d1", int64(1_000_000), 2500
	var ops []queue.Op
	var ids []string
	for i := range n {
		tok := fmt.Sprintf("t%04d", i)
		ids = append(ids, tok)
		ops = append(ops, pooled(item, tok, "u"+tok, int64(i), window))
	}
	ops = append(ops, reg(item, "late1", "ul1", n), reg(item, "late2", "ul2", n+1),
		pooled(item, "dupe", "ut0007", n+2, window), // a second token of a pooled user
		pooled(item, "left", "uleft", n+3, window),
		queue.Op{Kind: queue.OpLeave, ItemID: item, TokenID: "left", UserID: "uleft", Offset: n + 4})
	res, err := l.Apply(ctx, ops)
	require.NoError(t, err)
	require.Equal(t, queue.PooledOne, res[0].Outcome)
	require.Equal(t, queue.LateOne, res[n].Outcome)
	require.Equal(t, queue.Duplicate, res[n+2].Outcome)
	require.Equal(t, queue.Left, res[n+4].Outcome)

	st, err := l.Status(ctx, item, "ut0001", "", 0, 1)
	require.NoError(t, err)
	require.Equal(t, line.Status{State: line.Pooled, DrawAt: window, InDraw: n, TokenID: "t0001"}, st)
	st, err = l.Status(ctx, item, "ul2", "", 0, n+1)
	require.NoError(t, err)
	require.Equal(t, line.Status{State: line.Late, DrawAt: window, InDraw: n, TokenID: "late2"}, st)
	due, err := l.DueDraws(ctx, []string{item, "nothing"}, window-1)
	require.NoError(t, err)
	require.Empty(t, due, "the window has not closed")
	due, err = l.DueDraws(ctx, []string{item, "nothing"}, window)
	require.NoError(t, err)
	require.Equal(t, []queue.DueDraw{{Item: item, Window: window}}, due)

	// A sale moved later while people were pooled is not due before it opens.
	_, err = l.ApplyItem(ctx, topics.ItemState{V: 1, ItemID: item, Name: item, Stock: -1, Enabled: true, Version: 1,
		OpensAt: window + 500, DrawCommit: strings.Repeat("a", 64), DrawRounds: 3})
	require.NoError(t, err)
	due, err = l.DueDraws(ctx, []string{item}, window+499)
	require.NoError(t, err)
	require.Empty(t, due, "postponed")
	due, err = l.DueDraws(ctx, []string{item}, window+500)
	require.NoError(t, err)
	require.Equal(t, []queue.DueDraw{{Item: item, Window: window, Commit: strings.Repeat("a", 64), Rounds: 3}}, due)

	root := draw.Root([]byte("k"), item, "s")
	seed, err := draw.Seed(root, 3, 1)
	require.NoError(t, err)
	op := queue.DrawOp{ItemID: item, Offset: n + 5, Window: window, Round: 1, Seed: seed, Commit: draw.Commit(root, 3)}
	dr, err := l.Draw(ctx, op)
	require.NoError(t, err)
	require.Equal(t, queue.DrawResult{Outcome: queue.Drawn, Placed: n, Late: 2}, dr)
	want := slices.Clone(ids)
	require.NoError(t, draw.Order(seed, want))
	require.NotEqual(t, ids, want)
	line, err := l.Waiting(ctx, item, 0)
	require.NoError(t, err)
	require.Equal(t, append(want, "late1", "late2"), line)

	dr, err = l.Draw(ctx, op)
	require.NoError(t, err)
	require.Equal(t, queue.Replay, dr.Outcome)
	op.Offset++
	dr, err = l.Draw(ctx, op)
	require.NoError(t, err)
	require.Equal(t, queue.Stale, dr.Outcome)
	w, r, c, err := l.LastDraw(ctx, item)
	require.NoError(t, err)
	require.Equal(t, []any{window, int64(1), op.Commit}, []any{w, r, c})

	// After the draw: a register of the drawn window or none queues at the back.
	res, err = l.Apply(ctx, []queue.Op{pooled(item, "after1", "ua1", n+7, window), reg(item, "after2", "ua2", n+8)})
	require.NoError(t, err)
	require.Equal(t, []queue.Outcome{queue.Added, queue.Added}, []queue.Outcome{res[0].Outcome, res[1].Outcome})
}

// A draw cut short (its first chunk applied, then a crash) resumes to the
// same line.
func TestDrawResumesToTheSameLine(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	const item, window, n = "d2", int64(5000), 1500
	var ops []queue.Op
	for i := range n {
		ops = append(ops, pooled(item, fmt.Sprintf("t%d", i), fmt.Sprintf("u%d", i), int64(i), window))
	}
	_, err := l.Apply(ctx, ops)
	require.NoError(t, err)
	root := draw.Root([]byte("k"), item, "")
	seed, _ := draw.Seed(root, 1, 1)
	op := queue.DrawOp{ItemID: item, Offset: n, Window: window, Round: 1, Seed: seed, Commit: draw.Commit(root, 1)}

	// What a crash after the first chunk leaves: its tokens placed, nothing recorded.
	var all []string
	for i := range n {
		all = append(all, fmt.Sprintf("t%d", i))
	}
	require.NoError(t, draw.Order(seed, all))
	k := queue.KeysFor(item)
	for i, id := range all[:queue.DrawChunk] {
		require.NoError(t, rdb.Incr(ctx, k.Seq).Err())
		require.NoError(t, rdb.ZAdd(ctx, k.Waiting, redisZ(float64(i+1), id)).Err())
		require.NoError(t, rdb.ZRem(ctx, k.Pool, id).Err())
	}
	dr, err := l.Draw(ctx, op)
	require.NoError(t, err)
	require.Equal(t, queue.DrawResult{Outcome: queue.Drawn, Placed: n - queue.DrawChunk}, dr)
	line, err := l.Waiting(ctx, item, 0)
	require.NoError(t, err)
	require.Equal(t, all, line)
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }

// A scheduler that was away for several windows draws them in one: the
// latest closed window, never one still open.
func TestDueDrawTakesTheLatestClosedWindow(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	_, err := l.Apply(ctx, []queue.Op{pooled("w", "a", "ua", 0, 10), pooled("w", "b", "ub", 1, 20), pooled("w", "c", "uc", 2, 30)})
	require.NoError(t, err)
	due, err := l.DueDraws(ctx, []string{"w"}, 25)
	require.NoError(t, err)
	require.Len(t, due, 1)
	require.Equal(t, int64(20), due[0].Window)
}

// BenchmarkDraw100k places a pre-queue of 100,000 (pooled first, not
// timed): the read of the pool, the sort by the seed and 100 chunked script
// calls. Run with -benchtime=1x.
func BenchmarkDraw100k(b *testing.B) {
	ctx := context.Background()
	rdb := testenv.Redis(b)
	l := queue.New(rdb)
	const n = 100_000
	root := draw.Root([]byte("k"), "big", "")
	seed, _ := draw.Seed(root, 1, 1)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		item := fmt.Sprintf("big%d", i)
		ops := make([]queue.Op, n)
		for j := range ops {
			ops[j] = pooled(item, fmt.Sprintf("tok-%07d", j), fmt.Sprintf("u%07d", j), int64(j), 1000)
		}
		if _, err := l.Apply(ctx, ops); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, err := l.Draw(ctx, queue.DrawOp{ItemID: item, Offset: n, Window: 1000, Round: 1, Seed: seed, Commit: draw.Commit(root, 1)})
		if err != nil || res.Placed != n {
			b.Fatalf("draw: %+v %v", res, err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "placed/s")
}

// Late ones wait for the windows pooled when they began to queue, not for
// windows pooled after (random mode switched on meanwhile), so they never
// wait for ever behind a pool that keeps filling.
func TestLateOnesWaitOnlyForTheWindowsBeforeThem(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	root := draw.Root([]byte("k"), "m", "")
	commit := draw.Commit(root, 3)
	s1, _ := draw.Seed(root, 3, 1)
	s2, _ := draw.Seed(root, 3, 2)
	_, err := l.Apply(ctx, []queue.Op{
		pooled("m", "p1", "u1", 0, 100), pooled("m", "p2", "u2", 1, 100),
		reg("m", "late1", "u3", 2), // the sale opened, the draw is pending
		pooled("m", "r1", "u4", 3, 200),
		reg("m", "late2", "u5", 4),
	})
	require.NoError(t, err)
	dr, err := l.Draw(ctx, queue.DrawOp{ItemID: "m", Offset: 5, Window: 100, Round: 1, Seed: s1, Commit: commit})
	require.NoError(t, err)
	require.Equal(t, queue.DrawResult{Outcome: queue.Drawn, Placed: 2, Late: 2}, dr)
	_, err = l.Draw(ctx, queue.DrawOp{ItemID: "m", Offset: 6, Window: 200, Round: 2, Seed: s2, Commit: commit})
	require.NoError(t, err)
	line, err := l.Waiting(ctx, "m", 0)
	require.NoError(t, err)
	first := []string{"p1", "p2"}
	require.NoError(t, draw.Order(s1, first))
	require.Equal(t, append(first, "late1", "late2", "r1"), line)
}

// Everyone pooled before the late ones left: the late ones are not left
// waiting for a draw that would never come; a draw of their window (placing
// nobody) places them.
func TestLateOnesStrandedByLeavesAreDue(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	root := draw.Root([]byte("k"), "s", "")
	commit := draw.Commit(root, 2)
	_, err := l.ApplyItem(ctx, topics.ItemState{V: 1, ItemID: "s", Name: "s", Stock: -1, Enabled: true, Version: 1,
		OpensAt: 100, DrawCommit: commit, DrawRounds: 2})
	require.NoError(t, err)
	_, err = l.Apply(ctx, []queue.Op{
		pooled("s", "p1", "u1", 0, 100),
		reg("s", "late1", "u2", 1),
		pooled("s", "r1", "u3", 2, 5000), // a later window, still open
	})
	require.NoError(t, err)
	due, err := l.DueDraws(ctx, []string{"s"}, 150)
	require.NoError(t, err)
	require.Len(t, due, 1, "the pre-queue's window closed")
	require.Equal(t, int64(100), due[0].Window)

	_, err = l.Apply(ctx, []queue.Op{{Kind: queue.OpLeave, ItemID: "s", TokenID: "p1", UserID: "u1", Offset: 3}})
	require.NoError(t, err)
	due, err = l.DueDraws(ctx, []string{"s"}, 150)
	require.NoError(t, err)
	require.Len(t, due, 1, "the late one is due though its window is empty")
	require.Equal(t, int64(100), due[0].Window)
	seed, _ := draw.Seed(root, 2, 1)
	dr, err := l.Draw(ctx, queue.DrawOp{ItemID: "s", Offset: 4, Window: due[0].Window, Round: 1, Seed: seed, Commit: commit})
	require.NoError(t, err)
	require.Equal(t, queue.DrawResult{Outcome: queue.Drawn, Placed: 0, Late: 1}, dr)
	line, err := l.Waiting(ctx, "s", 0)
	require.NoError(t, err)
	require.Equal(t, []string{"late1"}, line)
	due, err = l.DueDraws(ctx, []string{"s"}, 150)
	require.NoError(t, err)
	require.Empty(t, due, "nothing more until the next window closes")
}

// A tick while a draw is half applied (a chunk placed, the record not yet
// recorded: a crash, or a tick between two chunks) admits nobody from the
// line, so every admission is decided before or after a whole draw, where a
// rebuild replays it; once the draw is recorded the next tick admits.
func TestPromoteWaitsForAHalfDrawnLine(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	const item, window, n = "hd", int64(5000), 1500
	_, err := l.ApplyItem(ctx, topics.ItemState{ItemID: item, Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 100, SessionTTLSeconds: 60}})
	require.NoError(t, err)
	var ops []queue.Op
	for i := range n {
		ops = append(ops, pooled(item, fmt.Sprintf("t%d", i), fmt.Sprintf("u%d", i), int64(i), window))
	}
	_, err = l.Apply(ctx, ops)
	require.NoError(t, err)
	root := draw.Root([]byte("k"), item, "")
	seed, _ := draw.Seed(root, 1, 1)
	op := queue.DrawOp{ItemID: item, Offset: n, Window: window, Round: 1, Seed: seed, Commit: draw.Commit(root, 1)}
	var all []string
	for i := range n {
		all = append(all, fmt.Sprintf("t%d", i))
	}
	require.NoError(t, draw.Order(seed, all))
	k := queue.KeysFor(item)
	args := []any{"0", strconv.Itoa(n), strconv.FormatInt(window, 10)}
	for _, id := range all[:queue.DrawChunk] {
		args = append(args, id)
	}
	require.NoError(t, rdb.Eval(ctx, queue.DrawSrcForTest, []string{k.Applied, k.Drawn, k.Pool, k.Seq, k.Waiting}, args...).Err())
	require.Equal(t, int64(queue.DrawChunk), rdb.ZCard(ctx, k.Waiting).Val(), "the first chunk is placed")

	now := time.Now()
	tk, err := l.Promote(ctx, item, 1, now, time.Second)
	require.NoError(t, err)
	assert.Zero(t, tk.Admitted, "nobody admitted from a half-drawn line")

	_, err = l.Draw(ctx, op)
	require.NoError(t, err)
	tk, err = l.Promote(ctx, item, 1, now.Add(time.Second), time.Second)
	require.NoError(t, err)
	assert.Equal(t, 100, tk.Admitted, "the whole draw recorded: the rate's 100 go in")
	assert.Equal(t, all[:100], tk.Unpublished)
	for _, a := range tk.Admits {
		assert.Equal(t, map[int32]int64{0: n}, a.Applied, "decided after the draw record")
	}
}
