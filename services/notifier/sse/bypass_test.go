package sse_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/topics"
)

// A bypass code's place on a stream: position 1 while it waits, then the
// admission at the next tick, on an item that admits nobody from the line
// (rate 0): the head never reaches it, the admission event names it.
func TestBypassPlaceStreamsItsAdmission(t *testing.T) {
	w := newWorld(t)
	w.setItem("x", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	fans := w.register("x", 3)
	ctx := context.Background()
	tok, err := w.signer.IssueQueue(token.Queue{TokenID: "x-staff", ItemID: "x", UserID: "staff", Offset: 10}, time.Hour)
	require.NoError(t, err)
	_, err = w.line.Apply(ctx, []queue.Op{{Kind: queue.OpRegister, ItemID: "x", TokenID: "x-staff", UserID: "staff", Offset: 10,
		Bypass: &queue.BypassOp{Code: "c", Count: 1}}})
	require.NoError(t, err)
	nt := w.notifier(time.Second, 0)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, err := w.open(cctx, nt.eventsURL("x", tok), nil)
	require.NoError(t, err)
	defer c.close()
	require.Equal(t, http.StatusOK, c.Resp.StatusCode)
	ev, err := c.next()
	require.NoError(t, err)
	require.Equal(t, sse.EventPosition, ev.Type)
	assert.Equal(t, int64(1), ev.position(t).Position, "a bypass place is next")

	w.scheduler(100 * time.Millisecond)
	for {
		ev, err = c.next()
		require.NoError(t, err)
		if ev.Type != sse.EventPosition {
			break
		}
	}
	require.Equal(t, sse.EventAdmitted, ev.Type)
	var a sse.Admitted
	require.NoError(t, json.Unmarshal([]byte(ev.Data), &a))
	adm, err := w.admit.ParseAdmission(a.AdmissionToken)
	require.NoError(t, err)
	assert.Equal(t, "x-staff", adm.TokenID)
	for _, f := range fans { // the line did not move
		st, err := w.line.Status(ctx, "x", f.UserID, "", 0, f.Offset)
		require.NoError(t, err)
		assert.Equal(t, line.Waiting, st.State)
	}
}
