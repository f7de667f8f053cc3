package registration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// lineOf is an item of n waiting registrations (user u<i>, token t<i>, offset i)
// on a redis-server of its own, admitting rate per second.
func lineOf(t *testing.T, item string, n int, rate float64) *queue.Line {
	t.Helper()
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	_, err := l.ApplyItem(ctx, topics.ItemState{ItemID: item, Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: rate, SessionTTLSeconds: 600}})
	require.NoError(t, err)
	var ops []queue.Op
	for i := 1; i <= n; i++ {
		ops = append(ops, queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: fmt.Sprintf("t%d", i), UserID: fmt.Sprintf("u%d", i), Offset: int64(i)})
	}
	_, err = l.Apply(ctx, ops)
	require.NoError(t, err)
	return l
}

func exact(t *testing.T, l *queue.Line, item string, i int) line.Status {
	t.Helper()
	st, err := l.Status(context.Background(), item, fmt.Sprintf("u%d", i), "", 0, int64(i))
	require.NoError(t, err)
	return st
}

// tickAt admits what the item's rate allows at now and acknowledges it, as
// the scheduler does.
func tickAt(t *testing.T, l *queue.Line, item string, now time.Time) {
	t.Helper()
	tk, err := l.Promote(context.Background(), item, 1, now, time.Second)
	require.NoError(t, err)
	require.NoError(t, l.AckPublished(context.Background(), 1, []string{item}, []int{len(tk.Unpublished)}))
}

// Without leaves, an answer moved by the head is the exact read, field for
// field, until the head reaches the token; then Moved refuses and the exact
// read says ADMITTED.
func TestMovedIsExactWithoutLeaves(t *testing.T) {
	ctx := context.Background()
	const item = "moved"
	l := lineOf(t, item, 300, 20)
	tracked := []int{1, 7, 60, 150, 299}
	first := map[int]line.Status{}
	for _, i := range tracked {
		first[i] = exact(t, l, item, i)
		require.Equal(t, line.Waiting, first[i].State)
		require.Equal(t, int64(i), first[i].Seq)
	}
	t0 := time.UnixMilli(1_900_000_000_000)
	compared, refused := 0, 0
	for k := 0; k < 40; k++ {
		tickAt(t, l, item, t0.Add(time.Duration(k)*200*time.Millisecond))
		m, err := l.Motion(ctx, item)
		require.NoError(t, err)
		for _, i := range tracked {
			got, ok := registration.Moved(first[i], m)
			want := exact(t, l, item, i)
			if !ok {
				assert.GreaterOrEqual(t, m.Head, first[i].Seq)
				assert.Equal(t, line.Admitted, want.State, "token %d with the head at %d", i, m.Head)
				refused++
				continue
			}
			require.Equal(t, line.Waiting, want.State)
			assert.Equal(t, want, got, "token %d, tick %d", i, k)
			compared++
		}
	}
	assert.Greater(t, compared, 40, "answers compared")
	assert.Greater(t, refused, 3, "tokens the head reached")
}

// A leave ahead is the documented error: until the next exact read the moved
// answer is off by at most the holes between the old head and the token at
// the read and the leaves ahead since; a new exact read is exact again.
func TestMovedIsOffOnlyByLeavesAhead(t *testing.T) {
	ctx := context.Background()
	const item = "leaves"
	l := lineOf(t, item, 100, 10)
	// One leave before the exact read (a hole the head will pass), two after.
	_, err := l.Apply(ctx, []queue.Op{{Kind: queue.OpLeave, ItemID: item, TokenID: "t3", UserID: "u3", Offset: 101}})
	require.NoError(t, err)
	first := exact(t, l, item, 80)
	require.Equal(t, int64(79), first.Position)
	_, err = l.Apply(ctx, []queue.Op{
		{Kind: queue.OpLeave, ItemID: item, TokenID: "t40", UserID: "u40", Offset: 102},
		{Kind: queue.OpLeave, ItemID: item, TokenID: "t50", UserID: "u50", Offset: 103},
	})
	require.NoError(t, err)
	t0 := time.UnixMilli(1_900_000_000_000)
	tickAt(t, l, item, t0) // 10 admitted: t1..t11 but t3, the head passes the hole at 3
	m, err := l.Motion(ctx, item)
	require.NoError(t, err)
	got, ok := registration.Moved(first, m)
	require.True(t, ok)
	want := exact(t, l, item, 80)
	// Exact: 79 - 10 admitted - 2 left after = 67. Moved (Position): the
	// one hole among the 80 seqs taken as spread evenly, ceil(69 × 79 / 80)
	// = 69: two too large for the leaves after the read.
	assert.Equal(t, int64(67), want.Position)
	assert.Equal(t, int64(69), got.Position)
	assert.LessOrEqual(t, abs(got.Position-want.Position), int64(3), "off by at most the holes at the read and the leaves since")
	// A new exact read starts from zero error.
	again, ok := registration.Moved(want, m)
	require.True(t, ok)
	assert.Equal(t, want, again)
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

func TestPollAfterGrowsWithPosition(t *testing.T) {
	prev := time.Duration(0)
	for _, p := range []int64{1, 100, 101, 1_000, 5_000, 50_000, 1_000_000} {
		d := registration.PollAfter(registration.Answer{Status: registration.StatusWaiting, Position: p})
		assert.GreaterOrEqual(t, d, prev, "position %d", p)
		assert.Positive(t, d)
		prev = d
	}
	assert.Equal(t, 30*time.Second, prev)
	assert.Positive(t, registration.PollAfter(registration.Answer{Status: registration.StatusPending}))
	for _, s := range []string{registration.StatusAdmitted, registration.StatusExpired, registration.StatusCompleted, registration.StatusLeft} {
		assert.Zero(t, registration.PollAfter(registration.Answer{Status: s}), s)
	}
}

// Position: exact at the reference head and when nobody left; never above the
// seqs left ahead; never increasing as the head moves on.
func TestPosition(t *testing.T) {
	for name, c := range map[string]struct {
		seq, refHead, refPos, head, want int64
	}{
		"at the reference head: exact":          {seq: 100, refHead: 40, refPos: 60, head: 40, want: 60},
		"a stale head (replica behind):  exact": {seq: 100, refHead: 40, refPos: 60, head: 10, want: 60},
		"nobody left: seq - head":               {seq: 100, refHead: 40, refPos: 60, head: 70, want: 30},
		"half left ahead: shrinks in step":      {seq: 100, refHead: 0, refPos: 50, head: 50, want: 25},
		"rounds up, never below 1":              {seq: 100, refHead: 0, refPos: 3, head: 99, want: 1},
		"head passed it":                        {seq: 100, refHead: 0, refPos: 100, head: 150, want: 1},
		"first in line":                         {seq: 1, refHead: 0, refPos: 1, head: 0, want: 1},
	} {
		got := registration.Position(c.seq, c.refHead, c.refPos, c.head)
		assert.Equal(t, c.want, got, name)
		assert.LessOrEqual(t, got, max(1, c.seq-max(c.head, c.refHead)), "%s: never above the places left ahead", name)
	}
	prev := int64(1 << 62)
	for h := int64(0); h <= 1000; h++ {
		p := registration.Position(1000, 0, 700, h)
		require.LessOrEqual(t, p, prev)
		prev = p
	}
}
