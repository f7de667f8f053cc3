package service_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"go.uber.org/zap"
)

// testParts are the default Parts on a redis-server and a kfake cluster of
// the test's own.
func testParts(t *testing.T) service.Parts {
	p, err := config.Defaults[service.Parts]()
	require.NoError(t, err)
	p.Name, p.Kafka.Brokers, p.Redis.Addr = "test", testenv.Kafka(t, 1), testenv.StartRedis(t).Addr
	return p
}

// An App serves health on its listener while its loops run; the first loop
// to fail ends the others, the service turns not ready, and what was opened
// is closed after every loop returned, the last opened first.
func TestAppRunsLoopsThenClosesInReverseOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := testParts(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	a, err := service.Start(ctx, p, ln, zap.NewNop(), nil)
	require.NoError(t, err)
	a.Watch(view.Options{Interval: 20 * time.Millisecond})
	require.NoError(t, a.Redis.Ping(ctx).Err(), "the App's Redis client reaches the server")

	var mu sync.Mutex
	var events []string
	note := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
	a.OnClose(func() { note("close first opened") })
	a.OnClose(func() { note("close last opened") })
	healthy, stop := make(chan struct{}), errors.New("stop")
	a.Go(func(ctx context.Context) error {
		<-ctx.Done()
		note("loop returned")
		return nil
	})
	a.Go(func(ctx context.Context) error {
		a.Ready.Set(true)
		<-healthy
		return stop
	})
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	require.Eventually(t, func() bool {
		r, err := http.Get("http://" + ln.Addr().String() + "/healthz")
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
		return r.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "/healthz served while the loops run")
	close(healthy)
	require.ErrorIs(t, <-done, stop)
	assert.Equal(t, []string{"loop returned", "close last opened", "close first opened"}, events)
	assert.False(t, a.Ready.Ready(), "not ready once Run returned")
	assert.Error(t, a.Redis.Ping(context.Background()).Err(), "the Redis client is closed last")
}

// A second port added with Listen is bound at once, served while Run runs
// beside the App's engine, and closed once Run returned.
func TestAppListenServesASecondPortUntilRunReturns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := testParts(t)
	p.Addr = "127.0.0.1:0"
	a, err := service.Start(ctx, p, nil, zap.NewNop(), nil)
	require.NoError(t, err)
	addr, err := a.Listen("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "second")
	}))
	require.NoError(t, err)
	_, err = a.Listen(addr.String(), http.NotFoundHandler())
	require.Error(t, err, "a taken port fails at Listen, before Run")

	get := func() (string, error) {
		r, err := http.Get("http://" + addr.String() + "/")
		if err != nil {
			return "", err
		}
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		return string(b), err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	require.Eventually(t, func() bool { b, err := get(); return err == nil && b == "second" }, 10*time.Second, 20*time.Millisecond,
		"the second port is served while Run runs")
	stop()
	require.NoError(t, <-done)
	_, err = get()
	assert.Error(t, err, "the second port is closed once Run returned")
}

// WR_PPROF_ADDR gives every service net/http/pprof on a port of its own (not
// on the public engine); a taken port fails the start.
func TestAppServesPprofOnItsOwnPortWhenAsked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	pprofAddr := free.Addr().String()
	require.NoError(t, free.Close())

	p := testParts(t)
	p.Addr, p.HTTP.PprofAddr = "127.0.0.1:0", pprofAddr
	a, err := service.Start(ctx, p, nil, zap.NewNop(), nil)
	require.NoError(t, err)
	_, err = service.Start(ctx, p, nil, zap.NewNop(), nil)
	require.Error(t, err, "the pprof port is taken by the first App")

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	require.Eventually(t, func() bool {
		r, err := http.Get("http://" + pprofAddr + "/debug/pprof/heap?debug=1")
		if err != nil {
			return false
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode == http.StatusOK && strings.Contains(string(b), "heap profile")
	}, 10*time.Second, 20*time.Millisecond, "the heap profile is served")
	stop()
	require.NoError(t, <-done)
}
