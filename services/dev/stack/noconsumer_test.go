package stack_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"github.com/waitroom/waitroom/services/dev/stack"
	"go.uber.org/zap/zaptest"
)

// A stack started without its consumer (WR_DEV_CONSUMER=false, as
// bench/ceiling.sh starts it) takes registrations, but nothing in it builds
// the view or applies them, until a consumer started apart against the same
// Kafka and Redis does.
func TestAStackWithoutItsConsumerLeavesTheLineToOneApart(t *testing.T) {
	e := newEnv(t, item("apart"))
	s, err := stack.Start(context.Background(), stack.Options{Brokers: e.brokers, Redis: &e.rcfg, TokenKey: testKey,
		AdminToken: adminToken, NoConsumer: true, Log: zaptest.NewLogger(t).Named("stack")})
	require.NoError(t, err)
	e.stack = s
	require.Empty(t, s.ConsumerURL, "no consumer listens in this stack")

	r, _ := e.register("apart", "alice")
	time.Sleep(500 * time.Millisecond) // what the stack's own consumer would take a few ms for
	a := e.do(http.MethodGet, "/api/v1/items/apart/registrations/"+r.Token, nil)
	require.Equal(t, http.StatusServiceUnavailable, a.Code, "nothing in the stack builds the view: %s", a.Body)
	require.Contains(t, string(a.Body), "VIEW_REBUILDING")

	cfg, err := config.Defaults[ingest.Config]()
	require.NoError(t, err)
	cfg.Kafka.Brokers, cfg.Redis = e.brokers, e.rcfg
	cfg.HTTP.ShutdownTimeout = 5 * time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ingest.Run(ctx, cfg, ln, zaptest.NewLogger(t).Named("consumer"), nil) }()

	require.Eventually(t, func() bool { // 503 VIEW_REBUILDING until the view is built and read as trusted
		a := e.do(http.MethodGet, "/api/v1/items/apart/registrations/"+r.Token, nil)
		var st httpapi.StatusResponse
		return a.Code == http.StatusOK && json.Unmarshal(a.Body, &st) == nil && st.Status == "WAITING"
	}, 30*time.Second, 20*time.Millisecond, "the consumer apart applies the stack's record")
	cancel()
	require.NoError(t, <-done)
	e.http.CloseIdleConnections()
	require.NoError(t, s.Stop(), "the stack stops without waiting for a consumer it never ran")
}
