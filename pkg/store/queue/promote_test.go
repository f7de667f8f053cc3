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
	"github.com/waitroom/waitroom/topics"
)

func setupItem(t *testing.T, l *queue.Line, id string, rate float64, maxActive, ttl int64, waiting int) {
	t.Helper()
	ctx := context.Background()
	_, err := l.ApplyItem(ctx, topics.ItemState{ItemID: id, Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: rate, MaxActive: maxActive, SessionTTLSeconds: ttl}})
	require.NoError(t, err)
	var ops []queue.Op
	for i := 0; i < waiting; i++ {
		ops = append(ops, reg(id, fmt.Sprintf("t%05d", i), fmt.Sprintf("u%d", i), int64(i)))
	}
	_, err = l.Apply(ctx, ops)
	require.NoError(t, err)
}

// tick promotes item once and acknowledges the event, as the scheduler does;
// it returns the tick with Unpublished being what this tick admitted.
func tick(t *testing.T, l *queue.Line, item string, epoch int64, now time.Time, burst time.Duration) (queue.Tick, error) {
	t.Helper()
	tk, err := l.Promote(context.Background(), item, epoch, now, burst)
	if err != nil {
		return tk, err
	}
	require.NoError(t, l.AckPublished(context.Background(), epoch, []string{item}, []int{len(tk.Unpublished)}))
	return tk, nil
}

func TestPromoteRateMaxActiveAndOrder(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "p", 10, 25, 60, 100)
	t0 := time.UnixMilli(1_000_000_000_000)

	// First tick: a budget of burst (1 s) of rate = 10 people.
	tk, err := tick(t, l, "p", 1, t0, time.Second)
	require.NoError(t, err)
	assert.Equal(t, []string{"t00000", "t00001", "t00002", "t00003", "t00004", "t00005", "t00006", "t00007", "t00008", "t00009"}, tk.Unpublished)
	assert.Equal(t, int64(10), tk.Head)
	assert.Equal(t, int64(90), tk.Waiting)
	assert.Equal(t, int64(10), tk.Active)

	// 200 ms later: 2 more (10/s).
	tk, err = tick(t, l, "p", 1, t0.Add(200*time.Millisecond), time.Second)
	require.NoError(t, err)
	assert.Equal(t, []string{"t00010", "t00011"}, tk.Unpublished)

	// Long after, the budget is capped at the burst (10), and maxActive (25) caps the room.
	tk, err = tick(t, l, "p", 1, t0.Add(30*time.Second), time.Second)
	require.NoError(t, err)
	assert.Len(t, tk.Unpublished, 10)
	tk, err = tick(t, l, "p", 1, t0.Add(40*time.Second), time.Second)
	require.NoError(t, err)
	assert.Len(t, tk.Unpublished, 3, "25 max active: 22 are active, 3 fit")
	assert.Equal(t, int64(25), tk.Active)
	assert.Equal(t, "t00024", tk.Unpublished[2])

	// Sessions (60 s) run out and free their places.
	tk, err = tick(t, l, "p", 1, t0.Add(61*time.Second), time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(12), tk.Expired, "the first 12 admitted at t0 and t0+200ms expired")
	assert.Len(t, tk.Unpublished, 10)
	assert.Equal(t, int64(23), tk.Active)

	st, err := l.Stats(ctx, "p")
	require.NoError(t, err)
	assert.Equal(t, int64(35), st.Head)
}

func TestPromoteFencing(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "f", 100, 0, 60, 50)
	now := time.Now()
	_, err := tick(t, l, "f", 7, now, time.Second)
	require.NoError(t, err)
	// A paused ex-leader with epoch 6 wakes up: it must not admit anyone.
	_, err = tick(t, l, "f", 6, now.Add(time.Second), time.Second)
	require.ErrorIs(t, err, queue.ErrFenced)
	st, err := l.Stats(ctx, "f")
	require.NoError(t, err)
	assert.Equal(t, int64(100-100+50-50+50), st.Waiting+st.Admitted, "nobody lost")
	assert.Equal(t, int64(7), st.Epoch)
	// The same for the pipelined form.
	_, errs, err := l.PromoteMany(ctx, []string{"f"}, 3, now.Add(2*time.Second), time.Second)
	require.NoError(t, err)
	assert.ErrorIs(t, errs[0], queue.ErrFenced)
	// The new leader goes on.
	_, errs, err = l.PromoteMany(ctx, []string{"f"}, 8, now.Add(2*time.Second), time.Second)
	require.NoError(t, err)
	assert.NoError(t, errs[0])
}

func TestPromoteIsInvisibleUnderCapacityAndPauses(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "calm", 0.5, 0, 60, 0)
	now := time.Now()
	tk, err := tick(t, l, "calm", 1, now, 200*time.Millisecond)
	require.NoError(t, err)
	assert.Empty(t, tk.Unpublished)
	_, err = l.Apply(ctx, []queue.Op{reg("calm", "first", "u", 0)})
	require.NoError(t, err)
	tk, err = tick(t, l, "calm", 1, now.Add(200*time.Millisecond), 200*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, []string{"first"}, tk.Unpublished, "nobody waits and there is room: admitted on the next tick")

	// Rate 0 pauses admission; a disabled item admits nobody.
	setupItem(t, l, "paused", 0, 0, 60, 5)
	tk, err = tick(t, l, "paused", 1, now, time.Second)
	require.NoError(t, err)
	assert.Empty(t, tk.Unpublished)
	assert.Equal(t, int64(5), tk.Waiting)
}

// A completion and a leave of one admitted token give the same place in
// either order: the api applies a completion before the consumer applies a
// leave recorded before it, a rebuild applies them in record order.
func TestCompleteAndLeaveCommute(t *testing.T) {
	ctx := context.Background()
	for _, order := range []string{"complete first", "leave first"} {
		t.Run(order, func(t *testing.T) {
			l := queue.New(testenv.Redis(t))
			setupItem(t, l, "c", 100, 0, 60, 1)
			_, err := tick(t, l, "c", 1, time.Now(), time.Second)
			require.NoError(t, err)
			leave := queue.Op{Kind: queue.OpLeave, ItemID: "c", TokenID: "t00000", UserID: "u0", Offset: 100}
			if order == "complete first" {
				ok, err := l.Complete(ctx, "c", "t00000", "u0")
				require.NoError(t, err)
				require.True(t, ok)
				res, err := l.Apply(ctx, []queue.Op{leave})
				require.NoError(t, err)
				require.Equal(t, queue.NotInLine, res[0].Outcome)
			} else {
				res, err := l.Apply(ctx, []queue.Op{leave})
				require.NoError(t, err)
				require.Equal(t, queue.Left, res[0].Outcome)
				ok, err := l.Complete(ctx, "c", "t00000", "u0")
				require.NoError(t, err)
				require.False(t, ok, "no live admission to complete")
			}
			st, err := l.Status(ctx, "c", "u0", "", 0, 0)
			require.NoError(t, err)
			assert.Equal(t, line.Completed, st.State)
			_, live, err := l.AdmittedUntil(ctx, "c", "t00000")
			require.NoError(t, err)
			assert.False(t, live)
		})
	}
}

// A completion applied after its admission was dropped as expired (a
// rebuild applies the ticks decided before the record first) completes the
// place, as the api did live; a token waiting again is left alone.
func TestCompleteAfterExpiry(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "c", 100, 0, 1, 2)
	now := time.Now()
	tk, err := tick(t, l, "c", 1, now, time.Second)
	require.NoError(t, err)
	require.Equal(t, 2, tk.Admitted)
	tk, err = tick(t, l, "c", 1, now.Add(2*time.Second), time.Second)
	require.NoError(t, err)
	require.Equal(t, int64(2), tk.Expired)
	ok, err := l.Complete(ctx, "c", "t00000", "u0")
	require.NoError(t, err)
	require.False(t, ok)
	st, err := l.Status(ctx, "c", "u0", "", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, line.Completed, st.State)
	st, err = l.Status(ctx, "c", "u1", "", 0, 0)
	require.NoError(t, err)
	assert.NotEqual(t, line.Completed, st.State, "the other expired admission was not completed")

	setupItem(t, l, "w", 0, 0, 60, 1) // rate 0: u0 waits
	ok, err = l.Complete(ctx, "w", "t00000", "u0")
	require.NoError(t, err)
	require.False(t, ok)
	st, err = l.Status(ctx, "w", "u0", "", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, line.Waiting, st.State, "a waiting token is never completed")
}

func TestCompleteAndStatusAfterAdmission(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "c", 100, 0, 60, 3)
	now := time.Now()
	tk, err := tick(t, l, "c", 1, now, time.Second)
	require.NoError(t, err)
	require.Len(t, tk.Unpublished, 3)

	st, err := l.Status(ctx, "c", "u0", "", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, line.Admitted, st.State)
	assert.InDelta(t, now.Add(60*time.Second).UnixMilli(), st.ExpiresAtMs, 5)

	ok, err := l.Complete(ctx, "c", "t00000", "u0")
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = l.Complete(ctx, "c", "t00000", "u0")
	require.NoError(t, err)
	assert.False(t, ok, "completing twice")
	st, err = l.Status(ctx, "c", "u0", "", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, line.Completed, st.State)
	_, live, err := l.AdmittedUntil(ctx, "c", "t00000")
	require.NoError(t, err)
	assert.False(t, live)

	// An admitted user registering again keeps the admission.
	res, err := l.Apply(ctx, []queue.Op{reg("c", "again", "u1", 10)})
	require.NoError(t, err)
	assert.Equal(t, queue.Duplicate, res[0].Outcome)
	assert.Equal(t, "t00001", res[0].TokenID)

	// After expiry the place is gone: status says so, and registering again queues anew.
	tk, err = tick(t, l, "c", 1, now.Add(61*time.Second), time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(2), tk.Expired)
	st, err = l.Status(ctx, "c", "u2", "", 0, 2)
	require.NoError(t, err)
	assert.Equal(t, line.Gone, st.State)
	res, err = l.Apply(ctx, []queue.Op{reg("c", "later", "u2", 11)})
	require.NoError(t, err)
	assert.Equal(t, queue.Added, res[0].Outcome)
}

// An event that was not acknowledged is handed out again with the next
// tick's admissions; a stale epoch cannot acknowledge.
func TestUnpublishedUntilAcknowledged(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "u", 5, 0, 60, 20)
	now := time.Now()
	tk, err := l.Promote(ctx, "u", 2, now, time.Second)
	require.NoError(t, err)
	assert.Equal(t, 5, tk.Admitted)
	first := tk.Unpublished
	require.Len(t, first, 5)
	// The publish failed: nothing acknowledged. The next tick carries both.
	tk, err = l.Promote(ctx, "u", 2, now.Add(400*time.Millisecond), time.Second)
	require.NoError(t, err)
	assert.Equal(t, 2, tk.Admitted)
	assert.Equal(t, first, tk.Unpublished[:5])
	assert.Len(t, tk.Unpublished, 7)
	// A fenced ex-leader's ack is refused.
	require.NoError(t, l.AckPublished(ctx, 1, []string{"u"}, []int{7}))
	tk, err = l.Promote(ctx, "u", 2, now.Add(400*time.Millisecond), time.Second)
	require.NoError(t, err)
	assert.Len(t, tk.Unpublished, 7)
	require.NoError(t, l.AckPublished(ctx, 2, []string{"u"}, []int{7}))
	tk, err = l.Promote(ctx, "u", 2, now.Add(600*time.Millisecond), time.Second)
	require.NoError(t, err)
	assert.Len(t, tk.Unpublished, tk.Admitted, "only the new admissions remain")
}

// A paused item admits nobody however long it waits, keeps its rate, and
// admits at that rate once resumed; a control item with the same policy,
// unpaused, admits on the same ticks.
func TestPausedItemKeepsItsRate(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "held", 3, 0, 60, 10)
	setupItem(t, l, "ctl", 3, 0, 60, 10)
	paused := topics.ItemState{ItemID: "held", Stock: -1, Enabled: true, Version: 2,
		Policy: topics.AdmissionPolicy{RatePerSecond: 3, SessionTTLSeconds: 60, Paused: true}}
	_, err := l.ApplyItem(ctx, paused)
	require.NoError(t, err)
	stored, ok, err := l.Item(ctx, "held")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, paused.Policy, stored.Policy, "the pause and the rate are both stored")

	now := time.Now()
	for i := range 3 {
		at := now.Add(time.Duration(i) * time.Second)
		tk, err := tick(t, l, "held", 1, at, time.Second)
		require.NoError(t, err)
		assert.Empty(t, tk.Unpublished, "paused: tick %d admitted someone", i)
		tk, err = tick(t, l, "ctl", 1, at, time.Second)
		require.NoError(t, err)
		assert.Len(t, tk.Unpublished, 3, "the control admits at 3/s on tick %d", i)
	}

	resumed := paused
	resumed.Version, resumed.Policy.Paused = 3, false
	_, err = l.ApplyItem(ctx, resumed)
	require.NoError(t, err)
	tk, err := tick(t, l, "held", 1, now.Add(4*time.Second), time.Second)
	require.NoError(t, err)
	assert.Len(t, tk.Unpublished, 3, "resumed at the kept rate")
}
