package admin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/docs"
	"github.com/waitroom/waitroom/pkg/httpserver"
	"github.com/waitroom/waitroom/services/scheduler/admin"
	"go.uber.org/zap"
)

// TestServedRoutesAreTheSpecs: every route of the scheduler's engine (the
// httpserver shell and the admin API with its console, as admission.Run
// builds it) is in docs/openapi.yaml for the scheduler, and every route the
// spec gives the scheduler is served.
func TestServedRoutesAreTheSpecs(t *testing.T) {
	doc, err := docs.OpenAPI(context.Background())
	require.NoError(t, err)
	engine := httpserver.New(zap.NewNop(), httpserver.NewRegistry(), &httpserver.Readiness{})
	admin.New(nil, nil, nil, "", zap.NewNop()).Routes(engine)
	var served []string
	for _, r := range engine.Routes() {
		served = append(served, docs.GinRoute(r.Method, r.Path))
	}
	require.ElementsMatch(t, docs.Routes(doc, "scheduler"), served)
}
