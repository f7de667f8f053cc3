package sse

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/redisclient"
	"github.com/waitroom/waitroom/pkg/kafka/blocklist"
	"github.com/waitroom/waitroom/pkg/kafka/itemcache"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/liveness"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// Config of the notifier service. The token settings are the API's: the
// notifier verifies the API's queue tokens and signs the same admission tokens.
type Config struct {
	Addr string `env:"WR_NOTIFIER_ADDR" envDefault:"127.0.0.1:8090"`
	registration.TokenConfig
	Heartbeat    time.Duration `env:"WR_SSE_HEARTBEAT" envDefault:"15s"`
	Retry        time.Duration `env:"WR_SSE_RETRY" envDefault:"3s"`
	WriteTimeout time.Duration `env:"WR_SSE_WRITE_TIMEOUT" envDefault:"10s"`
	Refresh      time.Duration `env:"WR_SSE_REFRESH" envDefault:"5s"`
	IdleRefresh  time.Duration `env:"WR_SSE_IDLE_REFRESH" envDefault:"60s"`
	// PositionEvery paces position events per stream (negative: unpaced).
	PositionEvery time.Duration `env:"WR_SSE_POSITION_EVERY" envDefault:"1s"`
	// RefreshRate caps the exact position reads of all streams per second
	// (the reads at connect are capped by OpenRate; on admission, not).
	RefreshRate int `env:"WR_SSE_REFRESH_RATE" envDefault:"1000"`
	// The caps on open streams (see Options; 0: no cap here).
	StreamsPerToken   int `env:"WR_SSE_STREAMS_PER_TOKEN" envDefault:"3"`
	StreamsPerAddress int `env:"WR_SSE_STREAMS_PER_ADDRESS" envDefault:"1000"`
	MaxStreams        int `env:"WR_SSE_MAX_STREAMS" envDefault:"100000"`
	// OpenRate caps the streams opened per second (0: no cap); an open past
	// it waits up to OpenWait for its turn (0: the default 1s; negative: not
	// at all), then is refused.
	OpenRate int           `env:"WR_SSE_OPEN_RATE" envDefault:"2000"`
	OpenWait time.Duration `env:"WR_SSE_OPEN_WAIT" envDefault:"1s"`
	// TrustedProxies are the addresses whose X-Forwarded-For names the
	// client for the per-address cap (the api's variable and default).
	TrustedProxies []string `env:"WR_TRUSTED_PROXIES" envSeparator:","`
	View           view.Config
	Kafka          config.Kafka
	Redis          config.Redis
	Log            config.Log
	Clock          config.Clock
	HTTP           config.HTTP

	// H2CServer is what serves cleartext HTTP/2 on the listener:
	// config.H2CNet, net/http's, or config.H2COwn, pkg/web/h2c, where an
	// open stream costs about half as much memory (BENCHMARKS: issue 28,
	// session 11) and a request with a body is refused 413 (the
	// notifier's routes are GETs).
	H2CServer string `env:"WR_SSE_H2C_SERVER" envDefault:"net"`

	// SeenFlush is how often the open streams of waiting places of items
	// with an idleTimeout reach Redis as signs of life (one ZADD per item).
	SeenFlush time.Duration `env:"WR_SEEN_FLUSH" envDefault:"5s"`
}

// Validate checks what the environment cannot.
func (c Config) Validate() error {
	switch {
	case c.Heartbeat <= 0:
		return fmt.Errorf("WR_SSE_HEARTBEAT must be positive, not %s", c.Heartbeat)
	case c.Retry <= 0:
		return fmt.Errorf("WR_SSE_RETRY must be positive, not %s", c.Retry)
	case c.WriteTimeout <= 0:
		return fmt.Errorf("WR_SSE_WRITE_TIMEOUT must be positive, not %s", c.WriteTimeout)
	case c.SeenFlush < 0:
		return fmt.Errorf("WR_SEEN_FLUSH must not be negative (0: the default 5s), not %s", c.SeenFlush)
	case c.IdleRefresh <= 0:
		return fmt.Errorf("WR_SSE_IDLE_REFRESH must be positive, not %s", c.IdleRefresh)
	case c.StreamsPerToken < 0:
		return fmt.Errorf("WR_SSE_STREAMS_PER_TOKEN must not be negative (0: no cap), not %d", c.StreamsPerToken)
	case c.StreamsPerAddress < 0:
		return fmt.Errorf("WR_SSE_STREAMS_PER_ADDRESS must not be negative (0: no cap), not %d", c.StreamsPerAddress)
	case c.MaxStreams < 0:
		return fmt.Errorf("WR_SSE_MAX_STREAMS must not be negative (0: no cap), not %d", c.MaxStreams)
	case c.OpenRate < 0:
		return fmt.Errorf("WR_SSE_OPEN_RATE must not be negative (0: no cap), not %d", c.OpenRate)
	case len(c.Kafka.Brokers) == 0:
		return errors.New("WR_KAFKA_BROKERS is empty")
	}
	if err := config.CheckH2CServer("WR_SSE_H2C_SERVER", c.H2CServer); err != nil {
		return err
	}
	return c.TokenConfig.Validate()
}

// Notifier is the service without its listener: the hub, the admissions
// follower and the item cache. Mount its Routes on any engine (its own in Run,
// or a front door that also serves the API and the waiting-room page), and
// serve that engine behind its Front, where HTTP/2 streams wait.
type Notifier struct {
	// OnBadRecord, when set before Run, is told about every admissions record
	// that cannot be decoded (after it was counted and logged): the DLQ hook.
	OnBadRecord BadRecordFunc

	hub    *Hub
	srv    *Server
	items  *itemcache.Cache
	blocks *blocklist.List
	follow *kgo.Client
	rdb    redis.UniversalClient
	view   *view.Watcher
	seen   *liveness.Tracker
	m      *Metrics
	opt    Options
	log    *zap.Logger
}

// New builds a notifier from cfg with its own Redis client and view
// watcher; metrics go to reg. It creates the clients and asks Kafka once
// whether it accepts our credentials (kclient.Check); Run starts it and
// closes them when it returns. The service's Run builds the same notifier on
// a service.App instead.
func New(ctx context.Context, cfg Config, log *zap.Logger, reg prometheus.Registerer) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base, err := kclient.Opts(ctx, cfg.Kafka, cfg.Kafka.ClientID+"-notifier", log)
	if err != nil {
		return nil, err
	}
	rdb, err := redisclient.New(cfg.Redis)
	if err != nil {
		return nil, err
	}
	watch := view.NewWatcher(rdb, view.Options{Interval: cfg.View.CheckInterval}, reg, log.Named("view"))
	n, err := newNotifier(ctx, cfg, rdb, base, watch, reg, log)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return n, nil
}

// newNotifier builds the notifier's own parts on rdb, the Kafka options base
// and the view watch (run by the caller): the admissions follower (checked
// against the cluster), the item and block tables, the hub and the server.
func newNotifier(ctx context.Context, cfg Config, rdb redis.UniversalClient, base []kgo.Opt, watch *view.Watcher, reg prometheus.Registerer, log *zap.Logger) (*Notifier, error) {
	signers, err := cfg.Signers(log)
	if err != nil {
		return nil, err
	}
	follow, err := kgo.NewClient(append(base, FollowOpts(time.Now(), time.Second)...)...)
	if err != nil {
		return nil, fmt.Errorf("admissions kafka client: %w", err)
	}
	if err := kclient.Check(ctx, follow, cfg.Kafka); err != nil {
		follow.Close()
		return nil, err
	}
	items, err := itemcache.New(base, log.Named("items"))
	if err != nil {
		follow.Close()
		return nil, err
	}
	blocks, err := blocklist.New(base, log.Named("blocks"))
	if err != nil {
		follow.Close()
		return nil, err
	}
	hub := NewHub(items)
	hub.SetPositionEvery(cfg.PositionEvery) // negative (unpaced): every event wakes
	m := NewMetrics(reg, hub)
	srv := NewServer(hub, rdb, items, signers.Queue.WithClock(cfg.Clock.Now), signers.Admission.WithClock(cfg.Clock.Now), cfg.options(), m, log)
	srv.now = cfg.Clock.Now
	srv.SetView(watch)
	srv.SetBlocks(blocks)
	// Cursors are signed with a key derived from the admission key, which
	// every replica holds (the dev key when it is unset: Signers refused
	// that unless DevKeys).
	srv.SetCursorKey(cursorKeyOf(cmp.Or(cfg.AdmissionKey, registration.DevAdmissionKey)))
	seen := liveness.New(queue.New(rdb), cfg.SeenFlush, srv.wantsSeen, log.Named("seen"))
	srv.SetSeen(seen)
	return &Notifier{hub: hub, srv: srv, items: items, blocks: blocks, follow: follow, rdb: rdb, view: watch, seen: seen, m: m, opt: srv.Options(), log: log}, nil
}

// Listener is the config of the notifier's listener: HTTP, served over h2c
// by H2CServer's server.
func (c Config) Listener() config.HTTP {
	h := c.HTTP
	h.H2CServer = c.H2CServer
	return h
}

// options are the server's Options from cfg.
func (c Config) options() Options {
	noCap := func(n int) int { // 0 is "no cap" here, the default in Options
		if n == 0 {
			return -1
		}
		return n
	}
	return Options{Heartbeat: c.Heartbeat, Retry: c.Retry, WriteTimeout: c.WriteTimeout, Refresh: c.Refresh, IdleRefresh: c.IdleRefresh,
		PositionEvery: c.PositionEvery, RefreshRate: c.RefreshRate,
		StreamsPerToken: noCap(c.StreamsPerToken), StreamsPerAddress: noCap(c.StreamsPerAddress), MaxStreams: noCap(c.MaxStreams),
		OpenRate: noCap(c.OpenRate), OpenWait: c.OpenWait}
}

// Routes adds the event stream route to r.
func (n *Notifier) Routes(r gin.IRouter) { n.srv.Routes(r) }

// Front returns next, the engine the Routes are on, behind a handler where
// the streams that cannot be hijacked (HTTP/2) wait once they opened in
// next (Server.Front): serve it in place of next.
func (n *Notifier) Front(next http.Handler) http.Handler { return n.srv.Front(next) }

// Hub is the notifier's hub (streams, feeds, heartbeat).
func (n *Notifier) Hub() *Hub { return n.hub }

// Run runs the view watcher and the notifier's loops (serve) until ctx ends;
// ready requires a trusted view. When it returns the clients New made are
// closed.
func (n *Notifier) Run(ctx context.Context, ready *httpserver.Readiness) error {
	if ready == nil {
		ready = &httpserver.Readiness{}
	}
	defer n.rdb.Close()
	defer n.follow.Close()
	ready.Require(n.view.Ready)
	ready.Detail(n.view.Detail)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return n.view.Run(gctx) })
	g.Go(func() error { return n.serve(gctx, ready) })
	return g.Wait()
}

// serve follows the admissions and items topics and beats the heartbeat
// until ctx ends; ready is set once the item cache caught up (before that
// every item would look closed). When ctx ends every stream is ended
// (EventSource reconnects, to another replica) before serve returns.
func (n *Notifier) serve(ctx context.Context, ready *httpserver.Readiness) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return n.items.Run(gctx) })
	g.Go(func() error { return n.blocks.Run(gctx) })
	g.Go(func() error { n.srv.watchView(gctx); return nil })
	g.Go(func() error { n.seen.Run(gctx); return nil })
	g.Go(func() error {
		Follow(gctx, n.follow, n.hub, n.m, n.OnBadRecord, n.log.Named("admissions"))
		return nil
	})
	g.Go(func() error {
		n.hub.Run(gctx, n.opt.Heartbeat, n.opt.ItemPoll)
		return nil
	})
	g.Go(func() error { return n.warmUp(gctx, ready) })
	err := g.Wait()
	ready.Set(false)
	n.hub.Stop()
	// The streams end at once when the hub stops; wait for them to close
	// their connections (EventSource then reconnects, to another replica).
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if werr := n.srv.Wait(wctx); werr != nil {
		n.log.Warn("streams still open at shutdown", zap.Error(werr))
	}
	return err
}

// warmUp waits for the item and block tables to catch up, then says the
// notifier is ready.
func (n *Notifier) warmUp(ctx context.Context, ready *httpserver.Readiness) error {
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err := n.items.Sync(wctx)
	if err == nil {
		err = n.blocks.Sync(wctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("notifier warm-up: %w", err)
	}
	if err := n.rdb.Ping(wctx).Err(); err != nil {
		n.log.Warn("redis does not answer yet; streams answer 503 until it does", zap.Error(err))
	}
	ready.Set(true)
	n.log.Info("notifier ready", zap.Int("items", len(n.items.All())))
	return nil
}

// Run serves the notifier until ctx ends. ln, when not nil, is used instead of
// listening on cfg.Addr (tests and the dev stack pass one). ready, when not
// nil, is set once the service is ready.
func Run(ctx context.Context, cfg Config, ln net.Listener, log *zap.Logger, ready *httpserver.Readiness) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	a, err := service.Start(ctx, service.Parts{Name: "notifier", Addr: cfg.Addr, Kafka: cfg.Kafka, Redis: cfg.Redis, HTTP: cfg.Listener()}, ln, log, ready)
	if err != nil {
		return err
	}
	if err := build(ctx, cfg, a); err != nil {
		a.Close()
		return err
	}
	return a.Run(ctx)
}

// build adds the notifier's own parts to a: its proxies, the view watcher,
// the notifier with its stream route, and its loops.
func build(ctx context.Context, cfg Config, a *service.App) error {
	if err := httpserver.TrustProxies(a.HTTP, cfg.TrustedProxies); err != nil {
		return err
	}
	watch := a.Watch(view.Options{Interval: cfg.View.CheckInterval})
	n, err := newNotifier(ctx, cfg, a.Redis, a.Kafka, watch, a.Reg, a.Log)
	if err != nil {
		return err
	}
	a.OnClose(n.follow.Close)
	n.Routes(a.HTTP)
	a.Front(n.Front)
	a.Go(func(ctx context.Context) error { return n.serve(ctx, a.Ready) })
	return nil
}
