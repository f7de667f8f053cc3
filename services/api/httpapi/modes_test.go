package httpapi_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/topics"
)

// An item in reject mode refuses registrations with the operator's message
// (the page shows it); a passthrough item takes them like a fifo one.
func TestRegisterHonoursTheQueueMode(t *testing.T) {
	rejecting := item("rejecting")
	rejecting.Mode, rejecting.RejectMessage = topics.ModeReject, "The sale is paused; back at 10:00."
	open := item("open")
	open.Mode = topics.ModePassthrough
	s := newAPI(t, rejecting, open)

	a := s.post("/api/v1/items/rejecting/registrations", map[string]string{"userId": "u1"})
	require.Equal(t, http.StatusConflict, a.Code, "%s", a.Body)
	var body httpserver.ErrorBody
	a.decode(t, &body)
	assert.Equal(t, "REGISTRATION_REJECTED", body.Error.Code)
	assert.Equal(t, "The sale is paused; back at 10:00.", body.Error.Message)

	a = s.post("/api/v1/items/open/registrations", map[string]string{"userId": "u1"})
	assert.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
}

// Refused registrations of a known item are counted per error code and
// reach the item's refused hash (the console's "refused"); malformed
// requests and unknown items are not counted.
func TestRefusalsAreCountedPerItemAndCode(t *testing.T) {
	rejecting := item("rejecting")
	rejecting.Mode = topics.ModeReject
	s := newAPIWith(t, func(c *httpapi.Config) { c.RefusedFlush = 50 * time.Millisecond }, rejecting, item("open"))
	for i := range 3 {
		a := s.post("/api/v1/items/rejecting/registrations", map[string]string{"userId": "u" + strconv.Itoa(i)})
		require.Equal(t, http.StatusConflict, a.Code, "%s", a.Body)
	}
	require.Equal(t, http.StatusNotFound, s.post("/api/v1/items/nope/registrations", map[string]string{"userId": "u"}).Code)
	require.Equal(t, http.StatusBadRequest, s.post("/api/v1/items/open/registrations", map[string]string{"userId": "bad user"}).Code)
	require.Equal(t, http.StatusAccepted, s.post("/api/v1/items/open/registrations", map[string]string{"userId": "ok"}).Code)
	ctx := context.Background()
	require.Eventually(t, func() bool {
		c, err := s.line.Counters(ctx, "rejecting")
		require.NoError(t, err)
		return c.Refused["REGISTRATION_REJECTED"] == 3
	}, 10*time.Second, 20*time.Millisecond, "the refusals counted")
	for _, it := range []string{"open", "nope"} {
		c, err := s.line.Counters(ctx, it)
		require.NoError(t, err)
		assert.Empty(t, c.Refused, "%s: a malformed request, an unknown item or a 202 is no refusal", it)
	}
}

// A registration applied but never placed reads REJECTED with the item's
// rejectMessage, so a polling page shows the operator's words as a stream's
// does.
func TestRejectedStatusCarriesTheOperatorsMessage(t *testing.T) {
	it := item("gala")
	it.RejectMessage = "sold to members first: try again at nine"
	s := newAPI(t, it)
	r, q := s.register("gala", "ann")
	_, err := s.line.Apply(context.Background(), []queue.Op{{Kind: queue.OpMark, ItemID: "gala", Partition: q.Partition, Offset: q.Offset}})
	require.NoError(t, err)
	st := s.status("gala", r.Token)
	assert.Equal(t, "REJECTED", st.Status)
	assert.Equal(t, it.RejectMessage, st.Message)
}
