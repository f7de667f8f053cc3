package sse_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/topics"
)

// The stream also runs on net/http's handler (HTTP/2, or NoHijack), mounted
// on an engine of the caller's, fed by hand instead of Kafka: position,
// admission, and a client that leaves is unsubscribed at once.
func TestStreamOnTheHandlerOfAnotherEngine(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	apply := func(v, maxActive int64) {
		_, err := w.line.ApplyItem(ctx, topics.ItemState{ItemID: "h", Stock: -1, Enabled: true, Version: v,
			Policy: topics.AdmissionPolicy{RatePerSecond: 1000, MaxActive: maxActive, SessionTTLSeconds: 60}})
		require.NoError(t, err)
	}
	apply(1, 1)
	regs := w.register("h", 3)

	hub, nt := w.serve(ctx, sse.Options{NoHijack: true, Heartbeat: 20 * time.Millisecond})

	c, err := w.open(ctx, nt.eventsURL("h", regs[1].Token), nil)
	require.NoError(t, err)
	defer c.close()
	ev, err := c.next()
	require.NoError(t, err)
	assert.Equal(t, int64(2), ev.position(t).Position)
	assert.Equal(t, "3000", c.Retry)

	promote := func(head int64) {
		tk, err := w.line.Promote(ctx, "h", 1, time.Now(), time.Second)
		require.NoError(t, err)
		require.Equal(t, head, tk.Head)
		require.NoError(t, w.line.AckPublished(ctx, 1, []string{"h"}, []int{int(tk.UnpublishedTotal)})) // published: told
		hub.Admission(topics.AdmissionEvent{V: 1, ItemID: "h", Admitted: tk.Unpublished, Head: tk.Head, Waiting: tk.Waiting, At: time.Now().UnixMilli()})
	}
	time.Sleep(100 * time.Millisecond) // a few heartbeats
	promote(1)
	ev, err = c.next()
	require.NoError(t, err)
	require.Equal(t, sse.EventPosition, ev.Type)
	assert.Equal(t, int64(1), ev.position(t).Position)
	apply(2, 2)
	promote(2)
	evs, err := c.all()
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, sse.EventAdmitted, evs[0].Type)
	assert.Positive(t, c.Pings)

	c2, err := w.open(ctx, nt.eventsURL("h", regs[2].Token), nil)
	require.NoError(t, err)
	_, err = c2.next()
	require.NoError(t, err)
	assert.Equal(t, float64(1), w.metric(nt, "waitroom_notifier_open_streams"))
	c2.close()
	require.Eventually(t, func() bool { return w.metric(nt, "waitroom_notifier_open_streams") == 0 }, 5*time.Second, 10*time.Millisecond)
}
