package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/services/api/httpapi"
)

// registerBody posts a raw register body for item and returns the 202 body
// and what its token says.
func (s *api) registerBody(itemID, body string) (httpapi.RegisterResponse, token.Queue) {
	s.t.Helper()
	a := s.do(http.MethodPost, "/api/v1/items/"+itemID+"/registrations", []byte(body))
	require.Equal(s.t, http.StatusAccepted, a.Code, "%s", a.Body)
	var r httpapi.RegisterResponse
	a.decode(s.t, &r)
	q, err := s.signer.ParseQueue(r.Token)
	require.NoError(s.t, err)
	return r, q
}

// A registration retried with the same requestId (its first answer lost:
// the broker had the record, the client never heard) keeps one place: both
// answers name the same token, the line holds one place, and a retry after
// that place ended does not place the token again. The chaos run's collapsed
// line (RELIABILITY.md) was eight such retries' first places, admitted with
// nobody to use them, holding every admission of the item for a whole
// session.
func TestRetriedRegistrationKeepsOnePlace(t *testing.T) {
	// Motion read fresh each time: the reads below follow the line's moves at once.
	e := newAPIWith(t, func(c *httpapi.Config) { c.MotionFresh = time.Nanosecond }, item("tix"))
	const body = `{"userId":"alice","requestId":"r-0123456789abcdef"}`
	r1, q1 := e.registerBody("tix", body)
	r2, q2 := e.registerBody("tix", body)
	require.Equal(t, r1.TokenID, r2.TokenID, "a retry names the same place")
	require.NotEqual(t, q1.Offset, q2.Offset, "both records are on the topic")
	e.apply(q1)
	e.apply(q2)
	for _, tok := range []string{r1.Token, r2.Token} {
		st := e.status("tix", tok)
		require.Equal(t, "WAITING", st.Status)
		assert.Equal(t, int64(1), st.Position)
		assert.Equal(t, int64(1), st.WaitingTotal, "one place, not two")
	}

	other, _ := e.registerBody("tix", `{"userId":"alice","requestId":"r-fedcba9876543210"}`)
	assert.NotEqual(t, r1.TokenID, other.TokenID, "another requestId is another registration")
	plain, _ := e.register("tix", "alice")
	assert.NotEqual(t, r1.TokenID, plain.TokenID, "no requestId: a new place each time, as before")
	a1, _ := e.registerBody("tix", `{"requestId":"anon-0123456789abcdef"}`)
	a2, _ := e.registerBody("tix", `{"requestId":"anon-0123456789abcdef"}`)
	assert.Equal(t, a1.TokenID, a2.TokenID, "anonymous: the same place")
	assert.Equal(t, a1.UserID, a2.UserID, "anonymous: the same label")

	// Admitted, completed, then a late retry: still completed, not in line again.
	e.admit("tix")
	e.ack("tix")
	st := e.status("tix", r1.Token)
	require.Equal(t, "ADMITTED", st.Status)
	c := e.post("/api/v1/admissions/complete", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "tix"})
	require.Equal(t, http.StatusOK, c.Code, "%s", c.Body)
	r3, q3 := e.registerBody("tix", body)
	require.Equal(t, r1.TokenID, r3.TokenID)
	e.apply(q3)
	assert.Equal(t, "COMPLETED", e.status("tix", r3.Token).Status, "a token is placed once")

	for _, bad := range []string{`{"requestId":"short"}`, `{"requestId":"has a space 0123456789"}`} {
		a := e.do(http.MethodPost, "/api/v1/items/tix/registrations", []byte(bad))
		assert.Equal(t, http.StatusBadRequest, a.Code, bad)
		assert.Equal(t, "INVALID_REQUEST_ID", a.errCode(t), bad)
	}
}
