package sse_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/topics"
)

// A lost Redis ends the open streams and refuses new ones with 503
// VIEW_REBUILDING and Retry-After until the view is rebuilt.
func TestViewLostEndsStreamsAndRefusesNew(t *testing.T) {
	w := newWorld(t)
	w.setItem("tix", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	r := w.register("tix", 1)[0]
	nt := w.notifier(time.Second, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := w.open(ctx, nt.eventsURL("tix", r.Token), nil)
	require.NoError(t, err)
	defer c.close()
	require.Equal(t, http.StatusOK, c.Resp.StatusCode)
	ev, err := c.next()
	require.NoError(t, err)
	require.Equal(t, "position", ev.Type, "the stream works before the loss")

	require.NoError(t, w.rdb.FlushAll(ctx).Err())
	for { // the server ends the stream (pings may come first); a context error would mean it never did
		if _, err := c.next(); err != nil {
			require.True(t, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF), "the stream did not end: %v", err)
			break
		}
	}
	again, err := w.open(ctx, nt.eventsURL("tix", r.Token), nil)
	require.NoError(t, err)
	defer again.close()
	require.Equal(t, http.StatusServiceUnavailable, again.Resp.StatusCode)
	require.Equal(t, "1", again.Resp.Header.Get("Retry-After"))
	var body httpserver.ErrorBody
	require.NoError(t, json.NewDecoder(again.Resp.Body).Decode(&body))
	require.Equal(t, view.Code, body.Error.Code)
}

// One item lost on its own Redis node (its marker gone, the view's marker
// in place): its open stream ends and a new one is refused 503
// VIEW_REBUILDING; the other item's stream goes on and new ones open.
func TestItemLostEndsItsStreamsAlone(t *testing.T) {
	w := newWorld(t)
	w.setItem("tix", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	w.setItem("other", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	r := w.register("tix", 1)[0]
	o := w.register("other", 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, it := range []string{"tix", "other"} {
		require.NoError(t, view.Register(ctx, w.rdb, it, "g"))
	}
	nt := w.notifier(200*time.Millisecond, 0)
	open := func(item, tok string) *sseConn {
		c, err := w.open(ctx, nt.eventsURL(item, tok), nil)
		require.NoError(t, err)
		t.Cleanup(c.close)
		return c
	}
	c, oc := open("tix", r.Token), open("other", o.Token)
	for _, s := range []*sseConn{c, oc} {
		require.Equal(t, http.StatusOK, s.Resp.StatusCode)
		ev, err := s.next()
		require.NoError(t, err)
		require.Equal(t, "position", ev.Type)
	}

	require.NoError(t, w.rdb.Del(ctx, view.ItemKey("tix")).Err()) // its node restarted empty
	for {
		if _, err := c.next(); err != nil {
			require.True(t, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF), "the stream did not end: %v", err)
			break
		}
	}
	again := open("tix", r.Token)
	require.Equal(t, http.StatusServiceUnavailable, again.Resp.StatusCode)
	var body httpserver.ErrorBody
	require.NoError(t, json.NewDecoder(again.Resp.Body).Decode(&body))
	require.Equal(t, view.Code, body.Error.Code)
	require.Contains(t, body.Error.Message, "tix")
	for pings := 0; pings < 3; { // the other stream goes on (a ping every 200 ms)
		line, err := oc.r.ReadString('\n')
		require.NoError(t, err)
		if line == ": ping\n" {
			pings++
		}
	}
	require.Equal(t, http.StatusOK, open("other", o.Token).Resp.StatusCode)
}

// A final state is never told from a view that rolled back since it was
// last confirmed (Redis failed over to a replica that missed writes, before
// the periodic check noticed): the stream reads its place gone, confirms
// the view first, finds fewer writes than it saw, and ends without the
// final event (found by the chaos suite's Sentinel failovers: people told
// "rejected" while still in line).
func TestNoFinalStateFromARolledBackView(t *testing.T) {
	w := newWorld(t)
	w.setItem("tix", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	r := w.register("tix", 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, w.rdb.HIncrBy(ctx, view.MarkerKey, "writes", 5).Err()) // the writes the services saw
	nt := w.notifierWith(time.Second, 200*time.Millisecond, func(c *sse.Config) { c.View.CheckInterval, c.IdleRefresh = time.Hour, 200*time.Millisecond })
	c, err := w.open(ctx, nt.eventsURL("tix", r.Token), nil)
	require.NoError(t, err)
	defer c.close()
	require.Equal(t, http.StatusOK, c.Resp.StatusCode)
	ev, err := c.next()
	require.NoError(t, err)
	require.Equal(t, "position", ev.Type)

	// The replica promoted missed the last writes: the place and the count.
	k := queue.KeysFor("tix")
	_, err = w.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, k.Waiting, r.TokenID)
		p.HDel(ctx, k.Users, r.UserID)
		p.HIncrBy(ctx, view.MarkerKey, "writes", -3)
		return nil
	})
	require.NoError(t, err)
	for { // the stream ends (pings may come first), never with a final event
		ev, err := c.next()
		if err != nil {
			require.True(t, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF), "the stream did not end: %v", err)
			break
		}
		require.Equal(t, "position", ev.Type, "told %s from a rolled-back view: %s", ev.Type, ev.Data)
	}
}
