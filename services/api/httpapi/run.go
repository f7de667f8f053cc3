package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/kafka/blocklist"
	"github.com/waitroom/waitroom/pkg/kafka/itemcache"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/assertion"
	"github.com/waitroom/waitroom/pkg/security/bypass"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/liveness"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/store/sitehealth"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/api/pow"
	"github.com/waitroom/waitroom/services/api/waitpage"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Config of the API service.
type Config struct {
	Addr string `env:"WR_API_ADDR" envDefault:"127.0.0.1:8080"`
	registration.TokenConfig
	QueueTokenTTL time.Duration `env:"WR_QUEUE_TOKEN_TTL" envDefault:"24h"`
	MaxBodyBytes  int64         `env:"WR_MAX_BODY_BYTES" envDefault:"4096"`
	PageTarget    string        `env:"WR_PAGE_TARGET_URL"` // continue link of the waiting-room page
	// Page is the install's waiting page: template, logo, colours.
	Page waitpage.Config
	// ProduceLinger is how long the first record of a produce request may
	// wait for others to join it: under load, fewer and larger requests cost
	// the api and the broker less per registration; a lone registration's
	// 202 waits this much longer.
	ProduceLinger  time.Duration `env:"WR_PRODUCE_LINGER" envDefault:"1ms"`
	ProduceTimeout time.Duration `env:"WR_PRODUCE_TIMEOUT" envDefault:"5s"`
	// TrustedProxies are the addresses whose X-Forwarded-For names the
	// client (the front door's; none by default); anyone else's is ignored,
	// so a client cannot choose the address its throttle bucket is keyed by.
	TrustedProxies []string `env:"WR_TRUSTED_PROXIES" envSeparator:","`
	Throttle       ThrottleConfig
	// PowKey signs proof-of-work challenges (empty: derived from
	// WR_TOKEN_KEY); PowTTL is how long a challenge may be solved and used.
	PowKey string        `env:"WR_POW_KEY" secret:"true"`
	PowTTL time.Duration `env:"WR_POW_TTL" envDefault:"2m"`
	// BypassPublicKey verifies operators' bypass codes: the base64 Ed25519
	// public key of the schedulers' WR_BYPASS_KEY (empty: codes refused).
	BypassPublicKey string `env:"WR_BYPASS_PUBLIC_KEY"`
	// Assertion says whose site-signed user assertions prove a userId.
	Assertion assertion.Config
	// StatusExactEvery: see Options; 0 reads every status exactly.
	StatusExactEvery time.Duration `env:"WR_STATUS_EXACT_EVERY" envDefault:"60s"`
	MotionFresh      time.Duration `env:"WR_STATUS_MOTION_FRESH" envDefault:"250ms"`
	StatusTokens     int           `env:"WR_STATUS_TOKENS" envDefault:"1000000"`
	// AutoWait is how long an auto registration (the kit's, for an item in
	// mode auto with room) waits for the scheduler's next ticks before it is
	// answered QUEUED and the visitor sent to the page (0: always the page).
	AutoWait time.Duration `env:"WR_AUTO_WAIT" envDefault:"1s"`
	// SeenFlush is how often the polls of items with an idleTimeout reach
	// Redis as signs of life (one ZADD per item).
	SeenFlush time.Duration `env:"WR_SEEN_FLUSH" envDefault:"5s"`
	// RefusedFlush is how often the counts of refused registrations (per
	// item and error code, for the console) reach Redis.
	RefusedFlush time.Duration `env:"WR_REFUSED_FLUSH" envDefault:"5s"`
	// SignalToken is the bearer token a site posts its health signal with
	// (POST /api/v1/items/{itemId}/signal; empty: the route is off).
	SignalToken string `env:"WR_SIGNAL_TOKEN" secret:"true"`
	View        view.Config
	Kafka       config.Kafka
	Redis       config.Redis
	Log         config.Log
	Clock       config.Clock
	HTTP        config.HTTP
}

// Validate checks what the environment cannot; the service refuses to start
// on an error.
func (c Config) Validate() error {
	switch {
	case c.Addr == "":
		return errors.New("WR_API_ADDR is empty")
	case c.QueueTokenTTL <= 0:
		return fmt.Errorf("WR_QUEUE_TOKEN_TTL must be positive, not %s", c.QueueTokenTTL)
	case c.MaxBodyBytes <= 0:
		return fmt.Errorf("WR_MAX_BODY_BYTES must be positive, not %d", c.MaxBodyBytes)
	case c.ProduceTimeout <= 0:
		return fmt.Errorf("WR_PRODUCE_TIMEOUT must be positive, not %s", c.ProduceTimeout)
	case c.ProduceLinger < 0:
		return fmt.Errorf("WR_PRODUCE_LINGER must not be negative, not %s", c.ProduceLinger)
	case c.StatusExactEvery < 0:
		return fmt.Errorf("WR_STATUS_EXACT_EVERY must not be negative, not %s", c.StatusExactEvery)
	case c.MotionFresh <= 0 || c.MotionFresh > 10*time.Second:
		return fmt.Errorf("WR_STATUS_MOTION_FRESH must be in (0, 10s], not %s", c.MotionFresh)
	case c.RefusedFlush < 0:
		return fmt.Errorf("WR_REFUSED_FLUSH must not be negative (0: the default 5s), not %s", c.RefusedFlush)
	case c.SeenFlush < 0:
		return fmt.Errorf("WR_SEEN_FLUSH must not be negative (0: the default 5s), not %s", c.SeenFlush)
	case c.AutoWait < 0 || c.AutoWait > 3*time.Second:
		// The kit's client gives up after 5 s: a longer wait would lose
		// the answer, and the place with it.
		return fmt.Errorf("WR_AUTO_WAIT must be in [0, 3s], not %s", c.AutoWait)
	case c.StatusTokens <= 0:
		return fmt.Errorf("WR_STATUS_TOKENS must be positive, not %d", c.StatusTokens)
	case len(c.Kafka.Brokers) == 0:
		return errors.New("WR_KAFKA_BROKERS is empty")
	}
	if err := c.Throttle.Validate(); err != nil {
		return err
	}
	if err := c.Assertion.Validate(); err != nil {
		return err
	}
	if err := c.Page.Validate(); err != nil {
		return err
	}
	if _, err := httpserver.ParseTrusted(c.TrustedProxies); err != nil {
		return err
	}
	if err := c.TokenConfig.Validate(); err != nil {
		return err
	}
	_, err := c.guardKeys() // after the token keys: a missing WR_TOKEN_KEY is named first
	return err
}

// Run serves the API until ctx ends. ln, when not nil, is used instead of
// listening on cfg.Addr (tests and the dev stack pass one). ready, when not
// nil, is set once the service is ready.
func Run(ctx context.Context, cfg Config, ln net.Listener, log *zap.Logger, ready *httpserver.Readiness) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	signers, err := cfg.Signers(log)
	if err != nil {
		return err
	}
	a, err := service.Start(ctx, service.Parts{Name: "api", Addr: cfg.Addr, Kafka: cfg.Kafka, Redis: cfg.Redis, HTTP: cfg.HTTP}, ln, log, ready)
	if err != nil {
		return err
	}
	if err := build(ctx, cfg, a, signers); err != nil {
		a.Close()
		return err
	}
	return a.Run(ctx)
}

// build adds the api's own parts to a: its producer, the item and block
// tables, the server and its pages on a's engine, the pprof port, and the
// loops beside them.
func build(ctx context.Context, cfg Config, a *service.App, signers registration.Signers) error {
	prod, err := newProducer(ctx, cfg, a.Kafka)
	if err != nil {
		return err
	}
	a.OnClose(prod.Close)
	items, err := itemcache.New(a.Kafka, a.Log.Named("items"))
	if err != nil {
		return err
	}
	blocks, err := blocklist.New(a.Kafka, a.Log.Named("blocks"))
	if err != nil {
		return err
	}
	signer := signers.Queue.WithClock(cfg.Clock.Now).RememberVerified(min(cfg.StatusTokens, rememberedTokens))
	s := &api{cfg: cfg, log: a.Log, ready: a.Ready, prod: prod, signer: signer, items: items, blocks: blocks}
	if err := s.build(ctx, a, signers.Admission.WithClock(cfg.Clock.Now)); err != nil {
		return err
	}
	a.Go(items.Run)
	a.Go(blocks.Run)
	a.Go(func(ctx context.Context) error { s.seen.Run(ctx); return nil })
	a.Go(func(ctx context.Context) error { s.refusals.Run(ctx); return nil })
	a.Go(s.becomeReady)
	return nil
}

// rememberedTokens bounds the queue tokens the api remembers as verified
// (token.Signer.RememberVerified, about 0.6 KiB each: 20 MiB at most): a
// status poll of one of them skips the signature check and decoding, about
// 6% of a status read's CPU, and finds the token's record (positions) in
// its slot, without a look-up of its own. A slot keeps a record its shard
// dropped until the token is forgotten (64 bytes each: 2 MiB at most).
const rememberedTokens = 1 << 15

// newProducer is the api's producer of registrations, checked against the
// cluster.
func newProducer(ctx context.Context, cfg Config, base []kgo.Opt) (*kgo.Client, error) {
	return kclient.NewChecked(ctx, cfg.Kafka, "producer", append(base,
		kgo.DefaultProduceTopic(topics.Registrations),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(cfg.ProduceLinger),
		kgo.RecordRetries(10),
		// A record not yet sent when its registration's wait ends
		// (Server.produce, at the produce timeout) is failed by the client
		// itself, as the wait's context once did; a batch times out by its
		// first record, so the linger is added.
		kgo.RecordDeliveryTimeout(cfg.ProduceTimeout+cfg.ProduceLinger),
	)...)
}

// api is the api's own parts that becomeReady and the loops beside the
// engine use.
type api struct {
	cfg      Config
	log      *zap.Logger
	ready    *httpserver.Readiness
	prod     *kgo.Client
	signer   *token.Signer
	items    *itemcache.Cache
	blocks   *blocklist.List
	seen     *liveness.Tracker
	refusals *Refusals
}

// build makes the server on a's Redis client (the line, the view, the
// guard's stores) and mounts it and the pages on a's engine.
func (s *api) build(ctx context.Context, a *service.App, admit *token.Signer) error {
	cfg, log, items, blocks, rdb := s.cfg, s.log, s.items, s.blocks, a.Redis
	a.Reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "waitroom_api_block_records_skipped_total",
		Help: "Malformed records on waitroom.blocks this replica skipped (each blocks nobody; logged with its offset and reason)."},
		func() float64 { return float64(blocks.Skipped()) }))
	watch := a.Watch(view.Options{Interval: cfg.View.CheckInterval})
	guard, err := cfg.guardKeys()
	if err != nil {
		return err
	}
	line := queue.New(rdb)
	guard.Spent, guard.Uses = pow.NewSpent(rdb), line
	if guard.Assertions, err = assertion.New(ctx, cfg.Assertion); err != nil {
		return err
	}
	s.seen = liveness.New(line, cfg.SeenFlush, func(item string) bool {
		it, ok := items.Get(item)
		return ok && it.IdleTimeoutSeconds > 0
	}, log.Named("seen"))
	s.refusals = NewRefusals(line, cfg.RefusedFlush, log.Named("refusals"))
	srv := NewServer(items, s.prod, line, s.signer, admit, Options{
		MaxBodyBytes: cfg.MaxBodyBytes, QueueTokenTTL: cfg.QueueTokenTTL, ProduceTimeout: cfg.ProduceTimeout, View: watch,
		Throttle:         NewThrottle(rdb, cfg.Throttle, a.Reg, log.Named("throttle")),
		Blocks:           blocks,
		StatusExactEvery: cfg.StatusExactEvery, MotionFresh: cfg.MotionFresh, StatusTokens: cfg.StatusTokens, Seen: s.seen,
		Guard: guard, Refusals: s.refusals, AutoWait: cfg.AutoWait, Signals: sitehealth.NewStore(rdb), SignalToken: cfg.SignalToken,
		CursorKey: StatusCursorKey(cmp.Or(cfg.AdmissionKey, registration.DevAdmissionKey)),
	}, a.Reg, log)
	srv.now = cfg.Clock.Now
	if err := httpserver.TrustProxies(a.HTTP, cfg.TrustedProxies); err != nil {
		return err
	}
	pages, err := waitpage.New(cfg.Page, cfg.PageTarget, items, log.Named("waitpage"))
	if err != nil {
		return fmt.Errorf("waiting page: %w", err)
	}
	mount(a.HTTP, srv, pages)
	return nil
}

// becomeReady warms up, waits for every block in the record to be in force,
// then says the api is ready.
func (s *api) becomeReady(ctx context.Context) error {
	err := warmUp(ctx, s.prod, s.items, s.signer)
	if err == nil { // ready only once every block in the record is in force
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err = s.blocks.Sync(wctx)
		cancel()
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	s.ready.Set(true)
	s.log.Info("api ready", zap.Int("items", len(s.items.All())))
	return nil
}

// mount adds the api's routes and its pages' to the engine (docs/openapi.yaml
// lists them; TestServedRoutesAreTheSpecs holds the two together).
func mount(r gin.IRouter, srv *Server, pages *waitpage.Pages) {
	srv.Routes(r)
	r.GET("/items/:itemId/wait", pages.Wait)
	r.GET("/items/:itemId/admitted", pages.Admitted)
	r.GET(waitpage.ScriptPath, waitpage.Script)
	r.GET(waitpage.PowWorkerPath, waitpage.PowWorker)
}

// warmUp makes the first real request as fast as the thousandth: Kafka
// metadata for the registrations topic, the item cache caught up, and the
// signing and encoding code paths run once.
func warmUp(ctx context.Context, prod *kgo.Client, items *itemcache.Cache, signer *token.Signer) error {
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if err := prod.Ping(wctx); err == nil {
			break
		} else if wctx.Err() != nil {
			return fmt.Errorf("warm-up: kafka unreachable: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := items.Sync(wctx); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	for i := 0; i < 100; i++ {
		raw, err := signer.IssueQueue(token.Queue{TokenID: "warmup", ItemID: "warmup", UserID: "warmup"}, time.Minute)
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if _, err := signer.ParseQueue(raw); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		_ = topics.Encode(&topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "w", ItemID: "w", UserID: "w", RequestedAt: 1})
	}
	return nil
}

// guardKeys builds the proof-of-work issuer and reads the bypass public key.
// The challenge key is WR_POW_KEY, or derived from the queue-token key, which
// the service cannot start without (the dev stack's built-in one there).
func (c Config) guardKeys() (Guard, error) {
	if c.PowTTL < 10*time.Second || c.PowTTL > time.Hour {
		return Guard{}, fmt.Errorf("WR_POW_TTL must be in 10s..1h, not %s", c.PowTTL)
	}
	key := []byte(c.PowKey)
	if c.PowKey == "" {
		secret := c.TokenKey
		if secret == "" && c.DevKeys {
			secret = registration.DevTokenKey
		}
		if secret == "" {
			return Guard{}, fmt.Errorf("WR_POW_KEY is not set and there is no WR_TOKEN_KEY to derive it from: %w", registration.ErrNoKey)
		}
		key = pow.DeriveKey(secret)
	}
	iss, err := pow.New(key, c.PowTTL)
	if err != nil {
		return Guard{}, fmt.Errorf("WR_POW_KEY: %w", err)
	}
	g := Guard{Pow: iss}
	if c.BypassPublicKey != "" {
		if g.BypassKey, err = bypass.ParsePublic(c.BypassPublicKey); err != nil {
			return Guard{}, fmt.Errorf("WR_BYPASS_PUBLIC_KEY: %w", err)
		}
		// The dev key's public half admits codes anyone can sign.
		if dev, _ := bypass.PublicOf(bypass.DevKey); !c.DevKeys {
			if err := config.RefusePublished("WR_BYPASS_PUBLIC_KEY", c.BypassPublicKey, dev); err != nil {
				return Guard{}, err
			}
		}
	}
	return g, nil
}
