// Package httpserver is the HTTP shell every waitroom service runs: a gin
// engine with JSON errors, panic recovery, per-route Prometheus metrics,
// /healthz, /readyz and /metrics, and a Serve that drains on shutdown.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/web/h2c"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// ErrorBody is every error answer: {"error":{"code","message"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail names the problem: a stable code for programs, a message for people.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Refusal is an error a client is shown as it is (registration.Error, the
// one such type): its HTTP status, stable code, message and Retry-After
// seconds (0: none).
type Refusal interface {
	error
	Answer() (status int, code, message string, retryAfter int)
}

// Abort answers err as the JSON error body and stops the handler chain: the
// one place where errors become HTTP. An err that is no Refusal is a 500
// INTERNAL (its text stays in the server). The code answered is left under
// ErrorCodeKey for middleware that counts refusals.
func Abort(c *gin.Context, err error) {
	status, code, message, retryAfter := http.StatusInternalServerError, "INTERNAL", "internal error", 0
	var r Refusal
	if errors.As(err, &r) {
		status, code, message, retryAfter = r.Answer()
	}
	if retryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(retryAfter))
	}
	c.Set(ErrorCodeKey, code)
	answer(c, status, code, message)
}

// answer writes the error body of the shell's own answers (404, 405, a
// panic, not ready) and stops the handler chain.
func answer(c *gin.Context, status int, code, message string) {
	c.AbortWithStatusJSON(status, ErrorBody{Error: ErrorDetail{Code: code, Message: message}})
}

// ErrorCodeKey is the gin context key under which Abort leaves the error
// code it answered.
const ErrorCodeKey = "waitroom.error-code"

// Bearer returns the token of an "Authorization: Bearer …" header value, or
// "": the one parser of bearer tokens (queue and admission tokens, the admin token).
func Bearer(authorization string) string {
	if len(authorization) > 7 && strings.EqualFold(authorization[:7], "bearer ") {
		return strings.TrimSpace(authorization[7:])
	}
	return ""
}

// CurrentToken is the path segment that stands for the bearer's (or
// ?token='s) queue token.
const CurrentToken = "current"

// QueueTokenOf returns a request's queue token: an Authorization bearer, else
// ?token= (EventSource cannot set headers), else the path segment unless it is
// CurrentToken.
func QueueTokenOf(r *http.Request, pathToken string) string {
	if t := Bearer(r.Header.Get("Authorization")); t != "" {
		return t
	}
	if t := QueryValue(r.URL.RawQuery, "token"); t != "" {
		return t
	}
	if pathToken != CurrentToken {
		return pathToken
	}
	return ""
}

// Readiness is a flag a service sets once it can serve, and optionally a
// condition it must keep meeting (Require).
type Readiness struct {
	ok     atomic.Bool
	check  atomic.Pointer[func() (ok bool, code, reason string)]
	detail atomic.Pointer[func() (name string, v any)]
}

// Detail adds a field to /readyz's 200 body: f's value under f's name, left
// out while the value is nil (the view's items being rebuilt, for example).
func (r *Readiness) Detail(f func() (name string, v any)) { r.detail.Store(&f) }

// Require adds a condition /readyz checks after the flag: when f answers not
// ok, /readyz answers 503 with f's code and reason (and Retry-After: 1).
func (r *Readiness) Require(f func() (ok bool, code, reason string)) { r.check.Store(&f) }

// Set marks the service ready (or not).
func (r *Readiness) Set(ok bool) { r.ok.Store(ok) }

// Healthy reports the flag and the condition set with Require: what /readyz answers.
func (r *Readiness) Healthy() bool {
	if !r.Ready() {
		return false
	}
	if f := r.check.Load(); f != nil {
		ok, _, _ := (*f)()
		return ok
	}
	return true
}

// Ready reports the flag.
func (r *Readiness) Ready() bool { return r.ok.Load() }

// New returns a gin engine with recovery, request metrics (registered on reg),
// JSON 404/405 and the health, readiness and metrics routes.
func New(log *zap.Logger, reg *prometheus.Registry, ready *Readiness) *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.ContextWithFallback = true
	m := newMetrics(reg)
	e.Use(m.middleware, recovery(log))
	e.NoRoute(func(c *gin.Context) { answer(c, http.StatusNotFound, "NOT_FOUND", "no route "+c.Request.URL.Path) })
	e.NoMethod(func(c *gin.Context) {
		answer(c, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", c.Request.Method+" is not allowed on "+c.Request.URL.Path)
	})
	e.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "alive"}) })
	e.GET("/readyz", func(c *gin.Context) {
		if !ready.Ready() {
			answer(c, http.StatusServiceUnavailable, "NOT_READY", "starting: waiting for Kafka, the item cache or warm-up")
			return
		}
		if f := ready.check.Load(); f != nil {
			if ok, code, reason := (*f)(); !ok {
				c.Header("Retry-After", "1")
				answer(c, http.StatusServiceUnavailable, code, reason)
				return
			}
		}
		body := gin.H{"status": "ready"}
		if f := ready.detail.Load(); f != nil {
			if name, v := (*f)(); v != nil {
				body[name] = v
			}
		}
		c.JSON(http.StatusOK, body)
	})
	e.GET("/metrics", gin.WrapH(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))
	return e
}

func recovery(log *zap.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if r := recover(); r != nil {
				if err, ok := r.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(r)
				}
				log.Error("handler panic", zap.Any("panic", r), zap.String("path", c.Request.URL.Path), zap.Stack("stack"))
				answer(c, http.StatusInternalServerError, "INTERNAL", "internal error")
			}
		}()
		c.Next()
	}
}

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// children are the series resolved so far, by route, method and code: a
	// request counts without hashing its labels or formatting its code. The
	// map is copied on a miss (a new series: rare) and read without a lock.
	children atomic.Pointer[map[seriesKey]series]
	mu       sync.Mutex // serializes the copies
}

type seriesKey struct {
	route, method string
	code          int
}

type series struct {
	requests prometheus.Counter
	latency  prometheus.Observer // nil for event streams
}

// maxSeries bounds the resolved series kept (methodLabel already folds a
// client's made-up methods into one).
const maxSeries = 512

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_http_requests_total", Help: "HTTP requests by route, method and status code.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "waitroom_http_request_duration_seconds", Help: "HTTP request latency by route and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route", "method"}),
	}
	reg.MustRegister(m.requests, m.latency)
	return m
}

func (m *metrics) middleware(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	k := seriesKey{route, methodLabel(c.Request.Method), c.Writer.Status()}
	sr, ok := series{}, false
	if p := m.children.Load(); p != nil {
		sr, ok = (*p)[k]
	}
	if !ok {
		sr = m.resolve(k)
	}
	sr.requests.Inc()
	if sr.latency != nil {
		sr.latency.Observe(time.Since(start).Seconds())
	}
}

// methodLabel is a request's method as the metrics label it: one of
// HTTP's own, or "OTHER" for any other token a client sends (net/http takes
// any), which would otherwise make series of its own in the registry, kept
// for the process's life.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// resolve returns k's series, keeping it while fewer than maxSeries are.
func (m *metrics) resolve(k seriesKey) series {
	sr := series{requests: m.requests.WithLabelValues(k.route, k.method, strconv.Itoa(k.code))}
	if !strings.HasSuffix(k.route, "/events") { // streams last minutes; their latency would drown the histogram
		sr.latency = m.latency.WithLabelValues(k.route, k.method)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := map[seriesKey]series{}
	if p := m.children.Load(); p != nil {
		old = *p
	}
	if len(old) < maxSeries {
		next := make(map[seriesKey]series, len(old)+1)
		maps.Copy(next, old)
		next[k] = sr
		m.children.Store(&next)
	}
	return sr
}

// NewRegistry returns a metrics registry with the Go runtime and process
// collectors every service exposes.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Serve serves h on ln until ctx ends, then stops accepting and drains open
// requests for at most cfg.ShutdownTimeout. A request must send its headers
// within cfg.ReadHeaderTimeout and its body within cfg.ReadTimeout (net/http
// lifts that deadline once the body is read, so it cuts no answer); there is
// no write timeout, as event streams answer for minutes (the notifier bounds
// each of its writes itself). With cfg.H2CMaxStreams it also serves
// cleartext HTTP/2 with prior knowledge, that many streams a connection
// (the idle timeout, 120 s, then applies to a connection without streams),
// by net/http or, with cfg.H2CServer H2COwn, by pkg/web/h2c.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, cfg config.HTTP, log *zap.Logger) error {
	drain := cfg.ShutdownTimeout
	srv := &http.Server{Handler: h, ReadHeaderTimeout: cfg.ReadHeaderTimeout, ReadTimeout: cfg.ReadTimeout,
		IdleTimeout: 120 * time.Second}
	var own *h2c.Server
	switch {
	case cfg.H2CMaxStreams > 0 && cfg.H2CServer == config.H2COwn:
		// Ours serves the connections that open with HTTP/2's preface;
		// net/http the others (HTTP/1.x).
		own = &h2c.Server{Handler: h, MaxStreams: uint32(cfg.H2CMaxStreams), ReadHeaderTimeout: cfg.ReadHeaderTimeout, //nolint:gosec // bounded by config
			IdleTimeout: srv.IdleTimeout, Log: log.Named("h2c")}
		ln = own.Split(ln)
	case cfg.H2CMaxStreams > 0:
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv.Protocols = p
		srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: cfg.H2CMaxStreams}
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("http listening", zap.String("addr", ln.Addr().String()))
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	var g errgroup.Group
	g.Go(func() error { return srv.Shutdown(sctx) })
	if own != nil {
		g.Go(func() error { return own.Shutdown(sctx) })
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("drain %s: %w", ln.Addr(), err)
	}
	log.Info("http drained", zap.String("addr", ln.Addr().String()))
	return nil
}
