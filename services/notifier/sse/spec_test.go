package sse_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/docs"
	"github.com/waitroom/waitroom/pkg/httpserver"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"go.uber.org/zap"
)

// TestServedRoutesAreTheSpecs: every route of the notifier's engine (the
// httpserver shell and the stream, as sse.Run builds it) is in
// docs/openapi.yaml for the notifier, and every route the spec gives the
// notifier is served.
func TestServedRoutesAreTheSpecs(t *testing.T) {
	doc, err := docs.OpenAPI(context.Background())
	require.NoError(t, err)
	engine := httpserver.New(zap.NewNop(), httpserver.NewRegistry(), &httpserver.Readiness{})
	sse.NewServer(nil, nil, nil, nil, nil, sse.Options{}, nil, zap.NewNop()).Routes(engine)
	var served []string
	for _, r := range engine.Routes() {
		served = append(served, docs.GinRoute(r.Method, r.Path))
	}
	require.ElementsMatch(t, docs.Routes(doc, "notifier"), served)
}
