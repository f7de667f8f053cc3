package promote

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/kafka/blocklist"
	"github.com/waitroom/waitroom/pkg/kafka/fence"
	"github.com/waitroom/waitroom/pkg/kafka/itemcache"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/bypass"
	"github.com/waitroom/waitroom/pkg/store/liveness"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/scheduler/admin"
	"go.uber.org/zap"
)

// Config of the scheduler service.
type Config struct {
	Addr       string        `env:"WR_SCHEDULER_ADDR" envDefault:"127.0.0.1:8082"`
	Tick       time.Duration `env:"WR_SCHEDULER_TICK" envDefault:"200ms"`
	LockExpiry time.Duration `env:"WR_SCHEDULER_LOCK_EXPIRY" envDefault:"2s"`
	Burst      time.Duration `env:"WR_SCHEDULER_BURST" envDefault:"1s"`
	// Shards divides the items among the replicas (1..64; every replica the same).
	Shards int `env:"WR_SCHEDULER_SHARDS" envDefault:"8"`
	// TxnID prefixes the transactional ids (one per shard) under which the
	// leaders write waitroom.admissions; the consumer's rebuild fences the
	// same ids before it reads the topic (the same value everywhere; empty:
	// fence.DefaultPrefix).
	TxnID string `env:"WR_SCHEDULER_TRANSACTIONAL_ID" envDefault:"waitroom-scheduler"`
	// MaxEventBytes bounds one admission event; bigger ticks go out as several.
	MaxEventBytes int `env:"WR_SCHEDULER_MAX_EVENT_BYTES" envDefault:"900000"`
	// AdminToken guards the admin API and the console (at least
	// MinAdminToken bytes; empty: both refuse every request).
	AdminToken string `env:"WR_ADMIN_TOKEN" secret:"true"`
	// ConsoleSecureCookie marks the console's session cookie Secure (https
	// only); ConsoleSessionTTL is how long a sign-in lasts.
	ConsoleSecureCookie bool          `env:"WR_CONSOLE_SECURE_COOKIE" envDefault:"true"`
	ConsoleSessionTTL   time.Duration `env:"WR_CONSOLE_SESSION_TTL" envDefault:"8h"`
	// DevKeys lets the dev stack's built-in development admin token, shorter
	// than MinAdminToken, pass. No environment variable sets it: only the dev
	// stack does, in code, so a deployed scheduler refuses a short token.
	DevKeys bool
	// The consumer's groups, whose lag the console shows (the consumer's
	// own variables and defaults).
	ConsumerGroup string `env:"WR_CONSUMER_GROUP" envDefault:"waitroom-consumer"`
	ItemsGroup    string `env:"WR_CONSUMER_ITEMS_GROUP" envDefault:"waitroom-items"`
	// BypassKey signs operators' bypass codes (base64 Ed25519 seed; empty:
	// the admin API issues none). The api verifies them with its public half.
	BypassKey string `env:"WR_BYPASS_KEY" secret:"true"`
	// DrawKey derives the draw seeds of pre-queues and random mode (the
	// same on every replica; empty: such items cannot be scheduled).
	DrawKey string `env:"WR_DRAW_KEY" secret:"true"`
	View    view.Config
	Kafka   config.Kafka
	Redis   config.Redis
	Log     config.Log
	Clock   config.Clock
	HTTP    config.HTTP

	// IdleSweep is how often the places of items with an idleTimeout are
	// checked for signs of life; SeenFlush how late the api and the
	// notifiers may write those signs (theirs), allowed for before a release.
	IdleSweep time.Duration `env:"WR_IDLE_SWEEP" envDefault:"1s"`
	SeenFlush time.Duration `env:"WR_SEEN_FLUSH" envDefault:"5s"`

	// Steering of the items whose policy asks for it (docs/steering.md):
	// how often their controllers step, the shortest time between two
	// moves of a target, and how long a silent site keeps its signal.
	SteerEvery         time.Duration `env:"WR_STEER_EVERY" envDefault:"1s"`
	SteerMinStep       time.Duration `env:"WR_STEER_MIN_STEP" envDefault:"5s"`
	SteerSignalTimeout time.Duration `env:"WR_STEER_SIGNAL_TIMEOUT" envDefault:"30s"`
}

// MinAdminToken is the shortest WR_ADMIN_TOKEN a scheduler accepts outside
// the dev stack: 32 bytes, the strength of the HMAC key derived from it.
const MinAdminToken = 32

// Validate checks what the environment cannot; the service refuses to start
// on an error.
func (c Config) Validate() error {
	switch {
	case c.Tick <= 0:
		return fmt.Errorf("WR_SCHEDULER_TICK must be positive, not %s", c.Tick)
	case c.LockExpiry <= 0:
		return fmt.Errorf("WR_SCHEDULER_LOCK_EXPIRY must be positive, not %s (it is raised to 3 ticks when shorter)", c.LockExpiry)
	case c.Shards < 1 || c.Shards > 64:
		return fmt.Errorf("WR_SCHEDULER_SHARDS must be in 1..64, not %d", c.Shards)
	case c.Burst < 0:
		return fmt.Errorf("WR_SCHEDULER_BURST must not be negative, not %s", c.Burst)
	case c.MaxEventBytes != 0 && (c.MaxEventBytes < 1000 || c.MaxEventBytes > 1_000_000):
		return fmt.Errorf("WR_SCHEDULER_MAX_EVENT_BYTES must be in 1000..1000000 (Kafka's default message size is 1 MB), not %d", c.MaxEventBytes)
	case c.IdleSweep < 0:
		return fmt.Errorf("WR_IDLE_SWEEP must not be negative (0: the default 1s), not %s", c.IdleSweep)
	case c.SeenFlush < 0:
		return fmt.Errorf("WR_SEEN_FLUSH must not be negative (0: the default 5s), not %s", c.SeenFlush)
	case c.SteerEvery < 0 || c.SteerMinStep < 0 || c.SteerSignalTimeout < 0:
		return errors.New("WR_STEER_EVERY, WR_STEER_MIN_STEP and WR_STEER_SIGNAL_TIMEOUT must not be negative (0: their defaults)")
	case c.AdminToken != "" && len(c.AdminToken) < MinAdminToken && !c.DevKeys:
		return fmt.Errorf("WR_ADMIN_TOKEN must be at least %d bytes, not %d (e.g. openssl rand -base64 32)", MinAdminToken, len(c.AdminToken))
	case c.ConsoleSessionTTL <= 0:
		return fmt.Errorf("WR_CONSOLE_SESSION_TTL must be positive, not %s", c.ConsoleSessionTTL)
	case c.DrawKey != "" && len(c.DrawKey) < 16:
		return errors.New("WR_DRAW_KEY must be at least 16 bytes")
	case len(c.Kafka.Brokers) == 0:
		return errors.New("WR_KAFKA_BROKERS is empty")
	}
	if c.BypassKey != "" {
		if _, err := bypass.ParsePrivate(c.BypassKey); err != nil {
			return fmt.Errorf("WR_BYPASS_KEY: %w", err)
		}
	}
	if !c.DevKeys { // the keys published in the source sign nothing deployed
		if err := errors.Join(config.RefusePublished("WR_BYPASS_KEY", c.BypassKey, bypass.DevKey),
			config.RefusePublished("WR_DRAW_KEY", c.DrawKey, draw.DevKey)); err != nil {
			return err
		}
	}
	return c.Redis.Validate()
}

// Run runs one replica until ctx ends: the tick loop, and the admin API,
// health, readiness and metrics on ln or cfg.Addr.
func Run(ctx context.Context, cfg Config, ln net.Listener, log *zap.Logger, ready *httpserver.Readiness) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	a, err := service.Start(ctx, service.Parts{Name: "scheduler", Addr: cfg.Addr, Kafka: cfg.Kafka, Redis: cfg.Redis, HTTP: cfg.HTTP}, ln, log, ready)
	if err != nil {
		return err
	}
	addr := cfg.Addr
	if ln != nil {
		addr = ln.Addr().String()
	}
	if err := build(ctx, cfg, a, addr); err != nil {
		a.Close()
		return err
	}
	return a.Run(ctx)
}

// build adds the scheduler's own parts to a: its producer, the scheduler
// itself, the item and block tables, the idle sweep and the admin API.
func build(ctx context.Context, cfg Config, a *service.App, addr string) error {
	reg, rdb, base, log := a.Reg, a.Redis, a.Kafka, a.Log
	prod, err := newProducer(ctx, cfg, base)
	if err != nil {
		return err
	}
	a.OnClose(prod.Close)
	watch := a.Watch(view.Options{Interval: cfg.View.CheckInterval})
	host, _ := os.Hostname()
	s := New(rdb, prod, Options{Tick: cfg.Tick, LockExpiry: cfg.LockExpiry, Burst: cfg.Burst, MaxEventBytes: cfg.MaxEventBytes, View: watch, Shards: cfg.Shards,
		Describe: host + " " + addr, DrawKey: []byte(cfg.DrawKey), Clock: cfg.Clock.Now, TxnPrefix: cmp.Or(cfg.TxnID, fence.DefaultPrefix), TxnOpts: base,
		Steer: SteerOptions{Every: cfg.SteerEvery, MinStep: cfg.SteerMinStep, SignalTimeout: cfg.SteerSignalTimeout}}, reg, log)

	items, err := itemcache.New(base, log.Named("items"))
	if err != nil {
		return err
	}
	reg.MustRegister(PolicyCollector(items))
	blocks, err := blocklist.New(base, log.Named("blocks"))
	if err != nil {
		return err
	}
	sweep := NewSweeper(s, items, cfg.IdleSweep, cmp.Or(cfg.SeenFlush, liveness.DefaultFlush), reg, log.Named("idle"))
	if cfg.AdminToken == "" {
		log.Warn("WR_ADMIN_TOKEN not set: the admin API refuses every request")
	}
	adm := admin.New(s.line, items, prod, cfg.AdminToken, log.Named("admin")).WithDrawKey([]byte(cfg.DrawKey)).WithKafka(base).WithLeader(s.Leading).
		WithBlocks(blocks).WithOperations(admin.NewOperations(prod, []string{cfg.ConsumerGroup, cfg.ItemsGroup}, s.ShardLeaders)).WithView(watch).
		WithConsole(rdb, admin.ConsoleOptions{SecureCookie: cfg.ConsoleSecureCookie, SessionTTL: cfg.ConsoleSessionTTL})
	if !cfg.ConsoleSecureCookie {
		log.Warn("WR_CONSOLE_SECURE_COOKIE=false: the console's session cookie also goes over plain http")
	}
	if cfg.BypassKey != "" {
		key, _ := bypass.ParsePrivate(cfg.BypassKey) // checked by Validate
		adm.WithBypass(key)
	}
	adm.Routes(a.HTTP)
	a.Go(items.Run)
	a.Go(blocks.Run)
	a.Go(func(ctx context.Context) error { sweep.Run(ctx); return nil })
	a.Go(func(ctx context.Context) error {
		if err := s.line.Load(ctx); err != nil {
			log.Warn("load scripts (promote reloads them by itself)", zap.Error(err))
		}
		a.Ready.Set(true)
		return s.Run(ctx)
	})
	return nil
}

// newProducer is the scheduler's producer (admission events, item states,
// operations), checked against the cluster.
func newProducer(ctx context.Context, cfg Config, base []kgo.Opt) (*kgo.Client, error) {
	return kclient.NewChecked(ctx, cfg.Kafka, "producer", append(base, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))...)
}
