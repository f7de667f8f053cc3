package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/redisview/view"
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
	// A read refused on its own confirmation may precede the watcher's next
	// check; /readyz follows at that check.
	require.Eventually(t, func() bool {
		ready := e.do(http.MethodGet, "/readyz", nil)
		return ready.Code == http.StatusServiceUnavailable && strings.Contains(string(ready.Body), "empty")
	}, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, view.Code, e.post("/api/v1/admissions/verify", map[string]string{"token": "x"}).errCode(t))
	e.register("tix", "bob") // Kafka is the record: still 202

	// What the consumer's rebuild ends with: the line back, the view ready.
	e.apply(q)
	require.NoError(t, view.SetReady(context.Background(), e.rdb, "g2", nil, time.Now()))
	require.Eventually(t, func() bool { return e.do(http.MethodGet, path, nil).Code == http.StatusOK }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, "WAITING", e.status("tix", r.Token).Status)
}

// One item's Redis node restarted empty while the view's marker lived on:
// that item answers 503 VIEW_REBUILDING (never a position read before the
// loss), the other item answers on, and /readyz stays ready and lists the
// item being rebuilt.
func TestItemLostAnswersRebuildingForItAlone(t *testing.T) {
	ctx := context.Background()
	e := newAPIWith(t, func(c *httpapi.Config) { c.Throttle.StatusRate = 0 }, item("tix"), item("other"))
	r, q := e.register("tix", "alice")
	e.apply(q)
	o, qo := e.register("other", "bob")
	e.apply(qo)
	require.NoError(t, view.Register(ctx, e.rdb, "tix", "test"))
	require.NoError(t, view.Register(ctx, e.rdb, "other", "test"))
	require.Equal(t, "WAITING", e.status("tix", r.Token).Status)
	require.Equal(t, "WAITING", e.status("other", o.Token).Status) // both remembered in memory

	require.NoError(t, e.rdb.Del(ctx, view.ItemKey("tix")).Err()) // its node restarted empty
	path := "/api/v1/items/tix/registrations/" + r.Token
	// Within one check of the watcher (its interval) a position remembered
	// before may still be told; then never.
	require.Eventually(t, func() bool {
		a := e.do(http.MethodGet, path, nil)
		return a.Code == http.StatusServiceUnavailable && a.errCode(t) == view.Code
	}, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		ready := e.do(http.MethodGet, "/readyz", nil)
		return ready.Code == http.StatusOK && strings.Contains(string(ready.Body), `"item":"tix"`)
	}, 10*time.Second, 10*time.Millisecond)
	for range 5 {
		a := e.do(http.MethodGet, path, nil)
		require.Equal(t, http.StatusServiceUnavailable, a.Code, "%s", a.Body)
		assert.Equal(t, "1", a.Header.Get("Retry-After"))
		assert.Contains(t, string(a.Body), "tix")
	}
	assert.Equal(t, "WAITING", e.status("other", o.Token).Status)
}
