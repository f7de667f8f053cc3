package sse_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/httpserver"
	"github.com/waitroom/waitroom/pkg/view"
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
