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

// An admission is told (status ADMITTED, AdmittedUntil live) only once its
// event is acknowledged on waitroom.admissions: until then the person reads
// WAITING at position 1 in the short form, since a failover rebuilds the view
// from Kafka, where an unpublished admission never happened.
func TestAdmissionToldOnlyOncePublished(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "tp", 1, 10, 60, 4) // the first tick admits t00000 only
	t0 := time.UnixMilli(1_000_000_000_000)
	tk, err := l.Promote(ctx, "tp", 1, t0, time.Second)
	require.NoError(t, err)
	require.Equal(t, []string{"t00000"}, tk.Unpublished)

	st, err := l.Status(ctx, "tp", "u0", "t00000", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, line.Status{State: line.Waiting, Position: 1, WaitingTotal: 3 + 1, TokenID: "t00000"}, st,
		"admitted in Redis, not on the record yet: the short waiting form")
	_, live, err := l.AdmittedUntil(ctx, "tp", "t00000")
	require.NoError(t, err)
	assert.False(t, live, "verify and complete refuse an unpublished admission")
	// Another token's prefix (t0000) never matches t00000's entry, and back.
	st, err = l.Status(ctx, "tp", "u1", "t00001", 0, 1)
	require.NoError(t, err)
	assert.Equal(t, int64(1), st.Position)
	assert.Equal(t, int64(3), st.WaitingTotal)
	assert.NotZero(t, st.Seq, "a line place reads the long form")

	// The next tick admits t00001 while t00000 is still unpublished: both wait.
	tk2, err := l.Promote(ctx, "tp", 1, t0.Add(time.Second), time.Second)
	require.NoError(t, err)
	require.Equal(t, int64(2), tk2.UnpublishedTotal)
	require.NoError(t, l.AckPublished(ctx, 1, []string{"tp"}, []int{1})) // t00000's event only
	st, err = l.Status(ctx, "tp", "u0", "t00000", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, line.Admitted, st.State, "published: told")
	assert.Equal(t, t0.Add(60*time.Second).UnixMilli(), st.ExpiresAtMs)
	until, live, err := l.AdmittedUntil(ctx, "tp", "t00000")
	require.NoError(t, err)
	assert.True(t, live)
	assert.Equal(t, t0.Add(60*time.Second).UnixMilli(), until.UnixMilli())
	st, err = l.Status(ctx, "tp", "u1", "t00001", 0, 1)
	require.NoError(t, err)
	assert.Equal(t, line.Status{State: line.Waiting, Position: 1, WaitingTotal: 2 + 1, TokenID: "t00001"}, st)

	require.NoError(t, l.AckPublished(ctx, 1, []string{"tp"}, []int{1}))
	st, err = l.Status(ctx, "tp", "u1", "t00001", 0, 1)
	require.NoError(t, err)
	assert.Equal(t, line.Admitted, st.State)
	_, live, err = l.AdmittedUntil(ctx, "tp", "t00001")
	require.NoError(t, err)
	assert.True(t, live)
}
