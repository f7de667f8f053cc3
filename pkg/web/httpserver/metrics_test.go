package httpserver_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"go.uber.org/zap"
)

// A method is any token a client types: each made-up one must not become
// series of its own, kept by the registry for the process's life.
func TestMadeUpMethodsMakeNoSeriesOfTheirOwn(t *testing.T) {
	reg := httpserver.NewRegistry()
	ready := &httpserver.Readiness{}
	ready.Set(true)
	e := httpserver.New(zap.NewNop(), reg, ready)
	for i := range 300 {
		for _, path := range []string{"/healthz", "/nowhere"} {
			w := httptest.NewRecorder()
			e.ServeHTTP(w, httptest.NewRequest("M"+strconv.Itoa(i), path, nil))
			require.Contains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, w.Code)
		}
	}
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusOK, w.Code)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	series := map[string]int{}
	for _, mf := range mfs {
		series[mf.GetName()] = len(mf.GetMetric())
	}
	assert.LessOrEqual(t, series["waitroom_http_requests_total"], 4, "requests by route, method and code")
	assert.LessOrEqual(t, series["waitroom_http_request_duration_seconds"], 4, "latency by route and method")
}
