package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/view"
	"github.com/waitroom/waitroom/services/api/httpapi"
)

// A lost Redis: status, verify and complete answer 503 VIEW_REBUILDING with
// Retry-After, never a wrong state; registrations are still accepted; /readyz
// says why; once the view is rebuilt the answers come back.
func TestViewLostAnswersRebuilding(t *testing.T) {
	// The test reads one token's status every few ms, far past its bucket.
	e := newAPIWith(t, func(c *httpapi.Config) { c.Throttle.StatusRate = 0 }, item("tix"))
	r, q := e.register("tix", "alice")
	e.apply(q)
	require.Equal(t, "WAITING", e.status("tix", r.Token).Status)

	require.NoError(t, e.rdb.FlushAll(context.Background()).Err())
	path := "/api/v1/items/tix/registrations/" + r.Token
	require.Eventually(t, func() bool {
		a := e.do(http.MethodGet, path, nil)
		if a.Code == http.StatusOK { // before the watcher's next check: must still be the truth or refused
			var st struct{ Status string }
			a.decode(t, &st)
			require.Equal(t, "WAITING", st.Status, "a wrong state answered after the loss: %s", a.Body)
			return false
		}
		require.Equal(t, http.StatusServiceUnavailable, a.Code, "%s", a.Body)
		return a.errCode(t) == view.Code
	}, 10*time.Second, 5*time.Millisecond)
	a := e.do(http.MethodGet, path, nil)
	require.Equal(t, http.StatusServiceUnavailable, a.Code)
	assert.Equal(t, "1", a.Header.Get("Retry-After"))
	assert.Equal(t, view.Code, e.post("/api/v1/admissions/verify", map[string]string{"token": "x"}).errCode(t))
	ready := e.do(http.MethodGet, "/readyz", nil)
	assert.Equal(t, http.StatusServiceUnavailable, ready.Code)
	assert.Contains(t, string(ready.Body), "empty")
	e.register("tix", "bob") // Kafka is the record: still 202

	// What the consumer's rebuild ends with: the line back, the view ready.
	e.apply(q)
	require.NoError(t, view.SetReady(context.Background(), e.rdb, "g2", nil, time.Now()))
	require.Eventually(t, func() bool { return e.do(http.MethodGet, path, nil).Code == http.StatusOK }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "WAITING", e.status("tix", r.Token).Status)
}
