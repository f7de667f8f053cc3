package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/httpserver"
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
