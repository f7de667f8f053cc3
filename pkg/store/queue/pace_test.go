package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// The status and the exact place of a waiting registration carry what the
// ETA needs: the admissions of the last minute, when the oldest of them was,
// and how many hold an admission.
func TestWaitingCarriesThePace(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "p", 10, 25, 60, 100)
	t0 := time.Now().Add(-10 * time.Second).Truncate(time.Millisecond)
	_, err := tick(t, l, "p", 1, t0, time.Second)
	require.NoError(t, err)
	_, err = tick(t, l, "p", 1, t0.Add(time.Second), time.Second)
	require.NoError(t, err)

	st, err := l.Status(ctx, "p", "u50", "", 0, 50)
	require.NoError(t, err)
	require.Equal(t, line.Waiting, st.State)
	assert.Equal(t, int64(31), st.Position)
	assert.Equal(t, int64(20), st.AdmittedLastMinute)
	assert.Equal(t, int64(20), st.Active)
	assert.Equal(t, t0.UnixMilli(), st.PacedSinceMs)

	p, waiting, err := l.Place(ctx, "p", "t00050")
	require.NoError(t, err)
	require.True(t, waiting)
	assert.Equal(t, line.Place{Seq: 51, Head: 20, Position: 31, Total: 80, AdmittedLastMinute: 20,
		PacedSinceMs: t0.UnixMilli(), Active: 20}, p)
	_, waiting, err = l.Place(ctx, "p", "t00001")
	require.NoError(t, err)
	assert.False(t, waiting, "admitted: not in the line")
}
