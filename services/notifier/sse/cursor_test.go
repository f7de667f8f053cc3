package sse_test

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/topics"
)

// redisCalls is how many commands redis-server ran so far, its INFO calls
// left out (INFO commandstats).
func (w *world) redisCalls() int64 {
	w.t.Helper()
	info, err := w.rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(w.t, err)
	var n int64
	for _, l := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":calls=")
		if !ok || name == "cmdstat_info" {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		c, err := strconv.ParseInt(v, 10, 64)
		require.NoError(w.t, err, l)
		n += c
	}
	return n
}

// A stream reopened with the cursor its last event id carried costs no Redis
// command, and gives the position the stream left off at; a cursor moved to
// another token, or changed, is ignored: that open reads Redis and tells the
// token's own place.
func TestAStreamReopensFromItsCursorWithoutRedis(t *testing.T) {
	w := newWorld(t)
	w.setItem("cur", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	regs := w.register("cur", 10)
	// Nothing of the notifier's own reads Redis during the test: no view
	// check after the first, no heartbeat (its idle re-read), no admissions.
	n := w.notifierWith(time.Hour, -1, func(c *sse.Config) {
		c.View.CheckInterval = time.Hour
		c.StreamsPerToken = 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// firstAt opens tok's stream with lastID as Last-Event-ID, or with query
	// ("?lastEventId=..."), and returns its first event, its position and
	// the Redis commands the open ran.
	firstAt := func(tok, lastID, query string) (sse.Position, event, int64) {
		t.Helper()
		hdr := map[string]string{}
		if lastID != "" {
			hdr["Last-Event-ID"] = lastID
		}
		before := w.redisCalls()
		c, err := w.open(ctx, n.eventsURL("cur", tok)+query, hdr)
		require.NoError(t, err)
		defer c.close()
		require.Equal(t, 200, c.Resp.StatusCode)
		ev, err := c.next()
		require.NoError(t, err)
		require.Equal(t, sse.EventPosition, ev.Type, ev.Data)
		return ev.position(t), ev, w.redisCalls() - before
	}
	first := func(tok, lastID string) (sse.Position, event, int64) { t.Helper(); return firstAt(tok, lastID, "") }
	me, other := regs[5], regs[7] // seq 6 and 8

	p, ev, calls := first(me.Token, "")
	require.Equal(t, int64(6), p.Position)
	require.Contains(t, ev.ID, ".", "the id carries a cursor")
	assert.GreaterOrEqual(t, calls, int64(2), "an open without a cursor reads Redis (the view's confirmation, the status, the place)")
	_, _, calls = first(me.Token, "0")
	assert.GreaterOrEqual(t, calls, int64(2), "a plain Last-Event-ID reads Redis too")

	p, ev2, calls := first(me.Token, ev.ID)
	assert.Equal(t, int64(6), p.Position)
	assert.Zero(t, calls, "an open with a valid cursor runs no Redis command")
	assert.Equal(t, ev.ID, ev2.ID, "and hands on the same cursor")
	assert.Equal(t, 1.0, w.metric(n, "waitroom_notifier_cursor_opens_total"))
	// The same, as ?lastEventId= (a client that cannot set the header).
	p, _, calls = firstAt(me.Token, "", "?lastEventId="+url.QueryEscape(ev.ID))
	assert.Equal(t, int64(6), p.Position)
	assert.Zero(t, calls, "a cursor in ?lastEventId= opens without Redis too")
	assert.Equal(t, 2.0, w.metric(n, "waitroom_notifier_cursor_opens_total"))

	// Another token's cursor: that token's own place, read from Redis.
	p, _, calls = first(other.Token, ev.ID)
	assert.Equal(t, int64(8), p.Position, "the queue token decides the place, not the cursor")
	assert.GreaterOrEqual(t, calls, int64(2), "another token's cursor is ignored")

	// A cursor whose place is changed (a better position) or whose MAC is bad.
	f := strings.Split(ev.ID, ".")
	require.Len(t, f, 5)
	better := strings.Join([]string{f[0], f[1], f[2], "1", f[4]}, ".")
	badMAC := strings.Join([]string{f[0], f[1], f[2], f[3], strings.Repeat("A", len(f[4]))}, ".")
	for _, forged := range []string{better, badMAC, ev.ID + ".1", f[0] + ".6.0.1"} {
		p, _, calls = first(me.Token, forged)
		assert.Equal(t, int64(6), p.Position, forged)
		assert.GreaterOrEqual(t, calls, int64(2), "a forged cursor %q is ignored", forged)
	}
	assert.Equal(t, 2.0, w.metric(n, "waitroom_notifier_cursor_opens_total"), "only the valid cursor opened without Redis")
}

// A cursor from a view generation rebuilt since is stale: the open reads
// Redis and hands on a cursor of the generation now trusted, which opens
// without Redis again.
func TestACursorFromAnEarlierViewIsIgnored(t *testing.T) {
	w := newWorld(t)
	w.setItem("gen", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	regs := w.register("gen", 3)
	n := w.notifierWith(time.Hour, -1, func(c *sse.Config) {
		c.View.CheckInterval = 50 * time.Millisecond
		c.StreamsPerToken = 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := func(lastID string) event {
		t.Helper()
		c, err := w.open(ctx, n.eventsURL("gen", regs[1].Token), map[string]string{"Last-Event-ID": lastID})
		require.NoError(t, err)
		defer c.close()
		require.Equal(t, 200, c.Resp.StatusCode)
		ev, err := c.next()
		require.NoError(t, err)
		require.Equal(t, sse.EventPosition, ev.Type, ev.Data)
		require.Equal(t, int64(2), ev.position(t).Position)
		return ev
	}
	old := first("0")
	require.Equal(t, old.ID, first(old.ID).ID)
	require.Equal(t, 1.0, w.metric(n, "waitroom_notifier_cursor_opens_total"), "valid before the view changes")

	require.NoError(t, view.SetReady(ctx, w.rdb, "test-2", nil, time.Now()))
	var fresh event
	require.Eventually(t, func() bool { fresh = first(old.ID); return fresh.ID != old.ID }, 10*time.Second, 100*time.Millisecond,
		"once the notifier trusts the new generation, the old cursor is read from Redis and replaced")
	opens := w.metric(n, "waitroom_notifier_cursor_opens_total")
	assert.Equal(t, fresh.ID, first(fresh.ID).ID)
	assert.Equal(t, opens+1, w.metric(n, "waitroom_notifier_cursor_opens_total"), "the new generation's cursor opens from memory")
}
