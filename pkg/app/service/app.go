package service

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/redisclient"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// Parts is the config of what every service starts.
type Parts struct {
	// Name is the service's name: the suffix of its Kafka client id.
	Name string
	// Addr is where health, readiness and metrics are served when Start is
	// given no listener.
	Addr  string
	Kafka config.Kafka
	Redis config.Redis
	HTTP  config.HTTP
}

// App is what every service starts: its logger, metrics registry and
// readiness, the Redis client, the Kafka options its clients start from, the
// HTTP engine with /healthz /readyz /metrics, and, once Watch was called,
// the view watcher. A service's Run builds its own parts on it, adds their
// loops with Go and their clients with OnClose, then calls Run.
type App struct {
	Log   *zap.Logger
	Reg   *prometheus.Registry
	Ready *httpserver.Readiness
	Redis redis.UniversalClient
	Kafka []kgo.Opt
	HTTP  *gin.Engine
	View  *view.Watcher

	p       Parts
	ln      net.Listener
	front   func(http.Handler) http.Handler // nil: Run serves HTTP as it is
	jobs    []func(context.Context) error
	closers []func()
}

// Start builds an App from p: the Redis client (not dialled yet), the Kafka
// options (TLS files read, nothing dialled) and the HTTP engine. ln, when not
// nil, is served instead of listening on p.Addr; ready, when not nil, is the
// readiness the engine answers (the dev stack reads it).
func Start(ctx context.Context, p Parts, ln net.Listener, log *zap.Logger, ready *httpserver.Readiness) (*App, error) {
	if ready == nil {
		ready = &httpserver.Readiness{}
	}
	a := &App{Log: log, Reg: httpserver.NewRegistry(), Ready: ready, p: p, ln: ln}
	rdb, err := redisclient.New(p.Redis)
	if err != nil {
		return nil, err
	}
	a.Redis = rdb
	a.OnClose(func() { _ = rdb.Close() })
	if a.Kafka, err = kclient.Opts(ctx, p.Kafka, p.Kafka.ClientID+"-"+p.Name, log); err != nil {
		a.Close()
		return nil, err
	}
	a.HTTP = httpserver.New(log, a.Reg, ready)
	if p.HTTP.PprofAddr != "" {
		if _, err := a.Listen(p.HTTP.PprofAddr, pprofMux()); err != nil {
			a.Close()
			return nil, fmt.Errorf("pprof: %w", err)
		}
	}
	return a, nil
}

// pprofMux serves net/http/pprof's handlers (WR_PPROF_ADDR).
func pprofMux() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return m
}

// Watch starts the view watcher with o (Interval from the service's
// view.Config): readiness requires a trusted view from now on, and Run runs
// the watcher.
func (a *App) Watch(o view.Options) *view.Watcher {
	a.View = view.NewWatcher(a.Redis, o, a.Reg, a.Log.Named("view"))
	a.Ready.Require(a.View.Ready)
	a.Ready.Detail(a.View.Detail)
	a.Go(a.View.Run)
	return a.View
}

// Front makes Run serve front(HTTP) in place of the engine: a handler that
// serves some requests itself, or their tail once the engine returned (the
// notifier's event streams wait there, below fewer frames than gin's).
func (a *App) Front(front func(http.Handler) http.Handler) { a.front = front }

// Go adds a loop Run runs until its context ends; the first to fail ends
// them all.
func (a *App) Go(job func(context.Context) error) { a.jobs = append(a.jobs, job) }

// OnClose adds f to what Run (or Close) does at the end, after every loop
// returned: the last added runs first, so a client opened after another is
// closed before it.
func (a *App) OnClose(f func()) { a.closers = append(a.closers, f) }

// Close runs the OnClose functions, the last added first. Run calls it; a
// service calls it itself only when its start fails before Run.
func (a *App) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// Listen serves h on addr besides the App's engine, with the same HTTP
// settings and shutdown, from Run on (a second port such as pprof's, kept
// off the public one). The listener is bound now, so a taken port fails the
// start; Close closes it when Run never ran. It returns the bound address
// (addr may name port 0).
func (a *App) Listen(addr string, h http.Handler) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	a.OnClose(func() { _ = ln.Close() }) // after Serve returned: already closed, a no-op
	a.Go(func(ctx context.Context) error { return httpserver.Serve(ctx, ln, h, a.p.HTTP, a.Log) })
	return ln.Addr(), nil
}

// Run serves HTTP and runs every loop until ctx ends or one fails, then
// marks the service not ready and closes what was opened, in reverse order.
func (a *App) Run(ctx context.Context) error {
	defer a.Close()
	if a.ln == nil {
		ln, err := net.Listen("tcp", a.p.Addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", a.p.Addr, err)
		}
		a.ln = ln
	}
	var h http.Handler = a.HTTP
	if a.front != nil {
		h = a.front(a.HTTP)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return httpserver.Serve(gctx, a.ln, h, a.p.HTTP, a.Log) })
	for _, job := range a.jobs {
		g.Go(func() error { return job(gctx) })
	}
	err := g.Wait()
	a.Ready.Set(false)
	return err
}
