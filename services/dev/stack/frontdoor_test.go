package stack_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/services/dev/stack"
)

// make run's front door answers /metrics itself and forwards the rest.
func TestFrontDoorDoesNotServeMetrics(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "api "+r.URL.Path)
	}))
	t.Cleanup(api.Close)
	h, err := stack.FrontDoor(api.URL, "", nil)
	require.NoError(t, err)
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	get := func(p string) (int, string) {
		resp, err := http.Get(front.URL + p)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get("/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "api /healthz", body, "forwarded")
	for _, p := range []string{"/metrics", "/METRICS", "/metrics/x"} {
		code, body := get(p)
		assert.Equal(t, http.StatusNotFound, code, p)
		assert.JSONEq(t, `{"error":{"code":"NOT_FOUND","message":"no route /metrics"}}`, body, p)
	}
}
