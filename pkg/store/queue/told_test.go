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

// A tick longer than the page the check searches (a big tick): the tokens
// past the page are judged by expiry, not told before their event is out,
// and a token admitted before that tick and published reads ADMITTED.
func TestABigTickIsToldOnlyOncePublished(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "tb", 1, 0, 60, 5001)
	t0 := time.UnixMilli(1_000_000_000_000)
	_, err := tick(t, l, "tb", 1, t0, time.Second) // t00000, published
	require.NoError(t, err)
	_, err = l.ApplyItem(ctx, topics.ItemState{ItemID: "tb", Stock: -1, Enabled: true, Version: 2,
		Policy: topics.AdmissionPolicy{RatePerSecond: 10_000, SessionTTLSeconds: 60}})
	require.NoError(t, err)
	tk, err := l.Promote(ctx, "tb", 1, t0.Add(time.Second), time.Second)
	require.NoError(t, err)
	require.Equal(t, int64(5000), tk.UnpublishedTotal)

	for _, i := range []int{1, 4096, 4097, 5000} {
		tok := fmt.Sprintf("t%05d", i)
		st, err := l.Status(ctx, "tb", fmt.Sprintf("u%d", i), tok, 0, int64(i))
		require.NoError(t, err)
		assert.Equal(t, line.Waiting, st.State, tok)
		_, live, err := l.AdmittedUntil(ctx, "tb", tok)
		require.NoError(t, err)
		assert.False(t, live, tok)
	}
	st, err := l.Status(ctx, "tb", "u0", "t00000", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, line.Admitted, st.State, "published before the big tick")

	require.NoError(t, l.AckPublished(ctx, 1, []string{"tb"}, []int{5000}))
	st, err = l.Status(ctx, "tb", "u5000", "t05000", 0, 5000)
	require.NoError(t, err)
	assert.Equal(t, line.Admitted, st.State)
}
