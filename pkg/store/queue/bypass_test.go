package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

func regBypass(item, tok, user string, off int64, code string, count int64) queue.Op {
	op := reg(item, tok, user, off)
	op.Bypass = &queue.BypassOp{Code: code, Count: count}
	return op
}

// A bypass code places at most its count of registrations, each admitted at
// the next tick ahead of the line and past the rate budget, without moving
// the head; beyond the count a register is applied but never placed.
func TestBypassAdmittedAtTheNextTickOncePerUse(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	// rate 1/s, cap 3: 10 people wait, one is admitted now.
	setupItem(t, l, "bp", 1, 3, 60, 10)
	t0 := time.UnixMilli(1_000_000_000_000)
	tk, err := tick(t, l, "bp", 1, t0, time.Second)
	require.NoError(t, err)
	require.Equal(t, []string{"t00000"}, tk.Unpublished)
	require.Equal(t, int64(1), tk.Head)

	// Code "c1" admits 2: staff-1 and staff-2 are placed, staff-3 is not;
	// staff-1 again is a duplicate (no use counted).
	res, err := l.Apply(ctx, []queue.Op{
		regBypass("bp", "s1", "staff-1", 10, "c1", 2),
		regBypass("bp", "s1b", "staff-1", 11, "c1", 2),
		regBypass("bp", "s2", "staff-2", 12, "c1", 2),
		regBypass("bp", "s3", "staff-3", 13, "c1", 2),
		regBypass("bp", "s4", "staff-4", 14, "c-expired", 0),
		regBypass("bp", "s2", "staff-2", 12, "c1", 2), // redelivered
	})
	require.NoError(t, err)
	got := make([]queue.Outcome, len(res))
	for i, r := range res {
		require.NoError(t, r.Err)
		got[i] = r.Outcome
	}
	assert.Equal(t, []queue.Outcome{queue.Added, queue.Duplicate, queue.Added, queue.Exhausted, queue.Exhausted, queue.Replay}, got)
	assert.Equal(t, int64(11), res[0].Seq)
	uses, err := l.BypassUses(ctx, "bp", "c1")
	require.NoError(t, err)
	assert.Equal(t, int64(2), uses)
	ex, err := l.Express(ctx, "bp", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"s1", "s2"}, ex)

	// Before the tick: waiting at position 1, read exactly (no seq).
	st, err := l.Status(ctx, "bp", "staff-2", "", 0, 12)
	require.NoError(t, err)
	assert.Equal(t, line.Waiting, st.State)
	assert.Equal(t, int64(1), st.Position)
	assert.Equal(t, int64(0), st.Seq, "an express place is read exactly every time")
	st, err = l.Status(ctx, "bp", "staff-3", "", 0, 13)
	require.NoError(t, err)
	assert.Equal(t, line.Rejected, st.State, "beyond the count: never placed")

	// The next tick (10 ms later: the rate budget holds nothing) admits both
	// staff, past the cap of 3, and the head stays at 1.
	tk, err = tick(t, l, "bp", 1, t0.Add(10*time.Millisecond), time.Second)
	require.NoError(t, err)
	assert.Equal(t, []string{"s1", "s2"}, tk.Unpublished)
	assert.Equal(t, int64(1), tk.Head, "express admissions do not move the head")
	assert.Equal(t, int64(3), tk.Active)
	assert.Equal(t, int64(9), tk.Waiting)
	for _, u := range []string{"staff-1", "staff-2"} {
		st, err := l.Status(ctx, "bp", u, "", 0, 12)
		require.NoError(t, err)
		assert.Equal(t, line.Admitted, st.State, u)
	}
	ex, err = l.Express(ctx, "bp", 0)
	require.NoError(t, err)
	assert.Empty(t, ex)
	// The line resumes in order: t00001 next, when the rate and cap allow.
	st, err = l.Status(ctx, "bp", "u1", "", 0, 1)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.Position)
	assert.Equal(t, int64(1), st.Head)
}

// An express place at the front of the line (it came first) is admitted
// once: the tick's FIFO admissions are the people behind it (found by the
// property test: one token twice in a tick's event, waiting -1).
func TestExpressAtTheFrontAdmittedOnce(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "fx", 10, 0, 60, 0)
	_, err := l.Apply(ctx, []queue.Op{
		regBypass("fx", "s1", "staff-1", 0, "c1", 1),
		reg("fx", "t1", "u1", 1),
		reg("fx", "t2", "u2", 2),
	})
	require.NoError(t, err)
	tk, err := tick(t, l, "fx", 1, time.UnixMilli(1_000_000_000_000), time.Second)
	require.NoError(t, err)
	assert.Equal(t, []string{"s1", "t1", "t2"}, tk.Unpublished, "each once: the express place, then the line")
	assert.Equal(t, 3, tk.Admitted)
	assert.Equal(t, int64(0), tk.Waiting)
	assert.Equal(t, int64(3), tk.Head)
}

// A paused item holds express places too; a place that left before its tick
// is dropped, not admitted.
func TestBypassPausedAndLeft(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "bq", 1, 0, 60, 2)
	pause(t, l, "bq", 2, true)
	_, err := l.Apply(ctx, []queue.Op{
		regBypass("bq", "s1", "staff-1", 2, "c", 5),
		regBypass("bq", "s2", "staff-2", 3, "c", 5),
		{Kind: queue.OpLeave, ItemID: "bq", TokenID: "s1", UserID: "staff-1", Offset: 4},
	})
	require.NoError(t, err)
	t0 := time.UnixMilli(1_000_000_000_000)
	tk, err := tick(t, l, "bq", 1, t0, time.Second)
	require.NoError(t, err)
	assert.Empty(t, tk.Unpublished, "paused: nobody, express or not")
	pause(t, l, "bq", 3, false)
	tk, err = tick(t, l, "bq", 1, t0.Add(time.Second), time.Second)
	require.NoError(t, err)
	assert.Equal(t, []string{"s2", "t00000"}, tk.Unpublished, "the express place first, the one that left dropped")
	assert.Equal(t, int64(1), tk.Head)
	ex, err := l.Express(ctx, "bq", 0)
	require.NoError(t, err)
	assert.Empty(t, ex)
}

// More express places than one promote call admits: the tick goes on in
// slices (the limit bounds each), all admitted at that one tick.
func TestBypassManyInSlices(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "bm", 1, 0, 60, 1)
	n := queue.MaxAdmitPerCall + 500
	ops := make([]queue.Op, n)
	for i := range ops {
		ops[i] = regBypass("bm", fmt.Sprintf("s%06d", i), fmt.Sprintf("staff-%d", i), int64(i+1), "big", int64(n))
	}
	_, err := l.Apply(ctx, ops)
	require.NoError(t, err)
	tk, err := l.Promote(ctx, "bm", 1, time.UnixMilli(1_000_000_000_000), time.Second)
	require.NoError(t, err)
	assert.Equal(t, n+1, tk.Admitted, "every express place and the one in line (rate 1, full budget)")
	assert.Equal(t, int64(1), tk.Head)
	assert.Equal(t, int64(n+1), tk.UnpublishedTotal)
	assert.Equal(t, "s000000", tk.Unpublished[0])
}

func pause(t *testing.T, l *queue.Line, item string, version int64, paused bool) {
	t.Helper()
	it, ok, err := l.Item(context.Background(), item)
	require.NoError(t, err)
	require.True(t, ok)
	it.Version, it.Policy.Paused = version, paused
	_, err = l.ApplyItem(context.Background(), it)
	require.NoError(t, err)
}
