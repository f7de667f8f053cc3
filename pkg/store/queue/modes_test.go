package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// Passthrough switches the room off: everyone waiting is admitted at the next
// tick, in order, whatever the rate and maxActive, and still counted; back to
// fifo, the rate and the cap hold again. A pause still admits nobody.
func TestPromotePassthroughAdmitsEveryoneInOrder(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "pt", 1, 5, 60, 300)
	t0 := time.UnixMilli(1_000_000_000_000)
	setMode := func(version int64, mode string, paused bool) {
		_, err := l.ApplyItem(ctx, topics.ItemState{ItemID: "pt", Stock: -1, Enabled: true, Version: version, Mode: mode,
			Policy: topics.AdmissionPolicy{RatePerSecond: 1, MaxActive: 5, SessionTTLSeconds: 60, Paused: paused}})
		require.NoError(t, err)
	}

	// fifo: rate 1/s and a cap of 5 admit one at a time.
	tk, err := tick(t, l, "pt", 1, t0, time.Second)
	require.NoError(t, err)
	require.Equal(t, []string{"t00000"}, tk.Unpublished)

	// passthrough but paused: still nobody.
	setMode(2, topics.ModePassthrough, true)
	tk, err = tick(t, l, "pt", 1, t0.Add(100*time.Millisecond), time.Second)
	require.NoError(t, err)
	require.Empty(t, tk.Unpublished)

	// passthrough: the other 299 in one tick, in order, past maxActive 5.
	setMode(3, topics.ModePassthrough, false)
	tk, err = tick(t, l, "pt", 1, t0.Add(200*time.Millisecond), time.Second)
	require.NoError(t, err)
	require.Len(t, tk.Unpublished, 299)
	for i, tok := range tk.Unpublished {
		require.Equal(t, tokenName(i+1), tok, "admission order")
	}
	assert.Equal(t, int64(300), tk.Head)
	assert.Equal(t, int64(0), tk.Waiting)
	assert.Equal(t, int64(300), tk.Active, "counted in the admitted set")
	st, err := l.Stats(ctx, "pt")
	require.NoError(t, err)
	assert.Equal(t, int64(300), st.AdmittedLastMinute, "counted in the pace")

	// Back to fifo: newcomers wait for room again (300 active > cap 5).
	setMode(4, topics.ModeFIFO, false)
	_, err = l.Apply(ctx, []queue.Op{reg("pt", "late", "late-user", 300)})
	require.NoError(t, err)
	tk, err = tick(t, l, "pt", 1, t0.Add(2*time.Second), time.Second)
	require.NoError(t, err)
	assert.Empty(t, tk.Unpublished, "fifo again: the cap holds")
	assert.Equal(t, int64(1), tk.Waiting)
}

func tokenName(i int) string { return fmt.Sprintf("t%05d", i) }

// What ApplyItem stores, Item reads back whole: the admin API patches the
// state it reads, so a field lost here would be reset by the next patch.
func TestItemReadsBackItsMode(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	for v, it := range []topics.ItemState{
		{ItemID: "m", Name: "M", Stock: 3, Enabled: true, Mode: topics.ModeReject, RejectMessage: "Back at 10",
			Policy: topics.AdmissionPolicy{RatePerSecond: 2, MaxActive: 4, SessionTTLSeconds: 60}},
		{ItemID: "m", Name: "M", Stock: 3, Enabled: true, Mode: topics.ModePassthrough,
			Template: "<p>any</p>", Templates: map[string]string{"ko": "<p>한</p>", "de": `<p a="x">"Grüß"</p>`},
			Policy: topics.AdmissionPolicy{RatePerSecond: 2, MaxActive: 4, SessionTTLSeconds: 60}},
		{ItemID: "m", Name: "M", Stock: 3, Enabled: true, // fifo, as published before modes existed; no templates left
			Policy: topics.AdmissionPolicy{RatePerSecond: 2, MaxActive: 4, SessionTTLSeconds: 60}},
	} {
		it.V, it.Version, it.UpdatedAt = topics.Version, int64(v+1), 77
		applied, err := l.ApplyItem(ctx, it)
		require.NoError(t, err)
		require.True(t, applied)
		got, ok, err := l.Item(ctx, "m")
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, it, got)
	}
}
