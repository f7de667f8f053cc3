// Package stack runs every waitroom service in one process against a Kafka and
// a Redis it is given: the dev entry (`make run`) and the end-to-end tests use it.
package stack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/kit/go/waitroomkit"
	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/security/assertion"
	"github.com/waitroom/waitroom/pkg/security/bypass"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"github.com/waitroom/waitroom/services/dev/shop"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/services/scheduler/promote"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Options say where the dependencies are and where to listen.
type Options struct {
	Brokers   []string
	RedisAddr string
	// Redis, when set, is the whole Redis config of every service (a
	// cluster or Sentinel, TLS, a user) and RedisAddr is ignored.
	Redis        *config.Redis
	APIAddr      string // "127.0.0.1:0" picks a free port
	ConsumerAddr string
	// NoConsumer leaves the consumer out: one runs as its own process
	// against the same Kafka and Redis (bench/ceiling.sh, to read its CPU
	// per record apart from the broker's). ConsumerURL is then empty.
	NoConsumer bool
	// Env loads each service's config from the environment over its defaults,
	// as the deployed service would (make run); off, the services get their
	// bare defaults (the tests: nothing in the environment leaks in). Either
	// way the fields below, when set, win, and the listeners default to the
	// services' own addresses only with Env (else free ports).
	Env      bool
	TokenKey string // HMAC key; empty: the config's, else the development key
	// ProduceLinger is how long the api's producer waits to batch records.
	ProduceLinger time.Duration
	// Schedulers is how many scheduler replicas run (default 3); SchedulerAddrs
	// their listeners (default: free ports).
	Schedulers     int
	SchedulerAddrs []string
	// Tick is the schedulers' tick (default 200 ms).
	Tick time.Duration
	// SeenFlush, when set, is every service's WR_SEEN_FLUSH (how often signs
	// of life reach Redis, and the grace the idle sweep allows for them).
	SeenFlush time.Duration
	// AdminToken guards the admin API on the schedulers.
	AdminToken string
	// DrawKey is the schedulers' WR_DRAW_KEY (empty: the config's, else a
	// development key, so a dev stack can schedule sales).
	DrawKey string
	// AdmissionKey is the base64 Ed25519 seed of admission tokens (empty: dev key).
	AdmissionKey string
	// AdmissionKID and AdmissionKeysExtra, when set, are the api's and the
	// notifier's WR_ADMISSION_KID and WR_ADMISSION_KEYS_EXTRA (a rollover).
	AdmissionKID       string
	AdmissionKeysExtra string
	// FrontAddr is the one origin for browsers: the page, the API and the event streams.
	FrontAddr string
	// NotifierAddr is the SSE notifier's listener (default: a free port).
	NotifierAddr string
	// Assertion, when set, is the api's trust in site-signed user
	// assertions (WR_ASSERTION_*).
	Assertion *assertion.Config
	Log       *zap.Logger
	// SnapshotInterval, when set, is the consumer's WR_SNAPSHOT_INTERVAL
	// (negative: no snapshots).
	SnapshotInterval time.Duration
	// SignalToken, when set, is the api's WR_SIGNAL_TOKEN: the site's
	// health reports are taken (docs/steering.md).
	SignalToken string
	// SteerEvery and SteerMinStep, when set, are the schedulers'
	// WR_STEER_EVERY and WR_STEER_MIN_STEP.
	SteerEvery, SteerMinStep time.Duration
}

// Stack is a running set of services.
type Stack struct {
	URL           string // the front door
	APIURL        string
	NotifierURL   string
	ConsumerURL   string
	SchedulerURLs []string
	done          chan error
	running       int
	cancel        context.CancelFunc
}

// Start starts the services and returns once every one is ready (with
// NoConsumer, once every one has started: see run).
func Start(ctx context.Context, o Options) (*Stack, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Schedulers <= 0 {
		o.Schedulers = 3
	}
	cfgs, err := configs(o)
	if err != nil {
		return nil, err
	}
	lns, err := listen(o, cfgs)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	running := 4 + o.Schedulers
	if o.NoConsumer {
		running--
	}
	s := &Stack{
		URL: "http://" + lns.front.Addr().String(), APIURL: "http://" + lns.api.Addr().String(),
		NotifierURL: "http://" + lns.notifier.Addr().String(),
		done:        make(chan error, running), running: running, cancel: cancel,
	}
	if lns.consumer != nil {
		s.ConsumerURL = "http://" + lns.consumer.Addr().String()
	}
	for _, l := range lns.schedulers {
		s.SchedulerURLs = append(s.SchedulerURLs, "http://"+l.Addr().String())
	}
	ready := s.run(ctx, o, cfgs, lns)
	// The demo shop behind the page's "continue": waitroomkit against the
	// api, sending refused visitors to the waiting page on the same origin.
	kit, err := waitroomkit.New(s.APIURL, waitroomkit.WithWaitURL(""))
	if err != nil {
		cancel()
		return nil, err
	}
	front, err := FrontDoor(s.APIURL, s.NotifierURL, shop.New(kit))
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		s.done <- wrap("front door", httpserver.Serve(ctx, lns.front, front, cfgs.api.HTTP, o.Log.Named("front")))
	}()
	if err := s.waitReady(ctx, ready); err != nil {
		cancel()
		return nil, err
	}
	return s, nil
}

// listeners are the stack's sockets, opened before any service starts.
type listeners struct {
	api, consumer, notifier, front net.Listener
	schedulers                     []net.Listener
}

func (l *listeners) close() {
	for _, ln := range append([]net.Listener{l.api, l.consumer, l.notifier, l.front}, l.schedulers...) {
		if ln != nil {
			ln.Close()
		}
	}
}

// listen opens every service's listener: the address o sets, else with o.Env
// the service's own configured one, else a free port. On an error none stays
// open.
func listen(o Options, cfgs serviceConfigs) (*listeners, error) {
	addr := func(set, own string) string {
		if set != "" {
			return set
		}
		if o.Env {
			return own
		}
		return "127.0.0.1:0"
	}
	l := &listeners{schedulers: make([]net.Listener, o.Schedulers)}
	open := func(to *net.Listener, what, at string) error {
		ln, err := net.Listen("tcp", at)
		if err != nil {
			l.close()
			return fmt.Errorf("listen %s: %w", what, err)
		}
		*to = ln
		return nil
	}
	if err := open(&l.api, "api", addr(o.APIAddr, cfgs.api.Addr)); err != nil {
		return nil, err
	}
	if !o.NoConsumer {
		if err := open(&l.consumer, "consumer", addr(o.ConsumerAddr, cfgs.consumer.Addr)); err != nil {
			return nil, err
		}
	}
	for i := range l.schedulers {
		at := "127.0.0.1:0"
		if i < len(o.SchedulerAddrs) {
			at = o.SchedulerAddrs[i]
		}
		if err := open(&l.schedulers[i], "scheduler", at); err != nil {
			return nil, err
		}
	}
	if err := open(&l.front, "front door", or(o.FrontAddr, "127.0.0.1:0")); err != nil {
		return nil, err
	}
	if err := open(&l.notifier, "notifier", addr(o.NotifierAddr, cfgs.notifier.Addr)); err != nil {
		return nil, err
	}
	return l, nil
}

// run starts the api, the consumer (unless o.NoConsumer), the schedulers and
// the notifier, each reporting its end on s.done, and returns whether all of
// them are ready.
func (s *Stack) run(ctx context.Context, o Options, cfgs serviceConfigs, lns *listeners) (allReady func() bool) {
	var apiReady, conReady, notReady httpserver.Readiness
	schReady := make([]httpserver.Readiness, o.Schedulers)
	go func() { s.done <- wrap("api", httpapi.Run(ctx, cfgs.api, lns.api, o.Log.Named("api"), &apiReady)) }()
	if o.NoConsumer {
		conReady.Set(true) // its own process: not this stack's to wait for
	} else {
		go func() {
			s.done <- wrap("consumer", ingest.Run(ctx, cfgs.consumer, lns.consumer, o.Log.Named("consumer"), &conReady))
		}()
	}
	for i, l := range lns.schedulers {
		name := fmt.Sprintf("scheduler-%d", i+1)
		go func() {
			s.done <- wrap(name, promote.Run(ctx, cfgs.scheduler, l, o.Log.Named(name), &schReady[i]))
		}()
	}
	go func() {
		s.done <- wrap("notifier", sse.Run(ctx, cfgs.notifier, lns.notifier, o.Log.Named("notifier"), &notReady))
	}()
	// Without its consumer the stack waits for each service to have started,
	// not for /readyz: the view the services require is built by the
	// consumer apart, which starts after the stack.
	ok := (*httpserver.Readiness).Healthy
	if o.NoConsumer {
		ok = (*httpserver.Readiness).Ready
	}
	return func() bool {
		for i := range schReady {
			if !ok(&schReady[i]) {
				return false
			}
		}
		return ok(&apiReady) && ok(&conReady) && ok(&notReady)
	}
}

// waitReady waits up to 60 s for ready, failing at once when a service stops.
func (s *Stack) waitReady(ctx context.Context, ready func() bool) error {
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case err := <-s.done:
			return errors.Join(fmt.Errorf("a service stopped while starting"), err)
		case <-deadline.C:
			return errors.New("services not ready within 60s")
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// serviceConfigs are the configs the stack runs its services with.
type serviceConfigs struct {
	api       httpapi.Config
	consumer  ingest.Config
	scheduler promote.Config
	notifier  sse.Config
}

// configs builds each service's config from that service's own defaults
// (config.Defaults, the tags of its Config: what the deployed service runs
// with when nothing is set), changed only where the stack must differ: where
// Kafka and Redis are, the stack's options, a quicker drain, and the
// development keys, which the dev stack alone may use.
func configs(o Options) (serviceConfigs, error) {
	c, err := loadConfigs(o.Env)
	if err != nil {
		return c, err
	}
	where := func(k *config.Kafka, r *config.Redis, h *config.HTTP) {
		k.Brokers, r.Addr = o.Brokers, o.RedisAddr
		if o.Redis != nil {
			pool := r.PoolSize
			*r = *o.Redis
			r.PoolSize = cmp.Or(r.PoolSize, pool)
		}
		h.ShutdownTimeout = 5 * time.Second // Ctrl-C should not wait 10 s
	}
	where(&c.api.Kafka, &c.api.Redis, &c.api.HTTP)
	where(&c.consumer.Kafka, &c.consumer.Redis, &c.consumer.HTTP)
	where(&c.scheduler.Kafka, &c.scheduler.Redis, &c.scheduler.HTTP)
	where(&c.notifier.Kafka, &c.notifier.Redis, &c.notifier.HTTP)
	keys := func(t *registration.TokenConfig) {
		t.TokenKey, t.AdmissionKey = or(o.TokenKey, t.TokenKey), or(o.AdmissionKey, t.AdmissionKey)
		t.AdmissionKID, t.AdmissionKeysExtra = or(o.AdmissionKID, t.AdmissionKID), or(o.AdmissionKeysExtra, t.AdmissionKeysExtra)
		t.DevKeys = true
	}
	keys(&c.api.TokenConfig)
	keys(&c.notifier.TokenConfig)
	// The stack's front door reaches the api and the notifier from loopback
	// and names the client in X-Forwarded-For, unless WR_TRUSTED_PROXIES
	// says otherwise.
	for _, t := range []*[]string{&c.api.TrustedProxies, &c.notifier.TrustedProxies} {
		if len(*t) == 0 {
			*t = []string{"127.0.0.1/32", "::1/128"}
		}
	}
	return c, c.apply(o)
}

// loadConfigs is each service's config from the environment (env) or from
// its defaults alone.
func loadConfigs(env bool) (serviceConfigs, error) {
	var c serviceConfigs
	var errs [4]error
	if env {
		c.api, errs[0] = config.Load[httpapi.Config]()
		c.consumer, errs[1] = config.Load[ingest.Config]()
		c.scheduler, errs[2] = config.Load[promote.Config]()
		c.notifier, errs[3] = config.Load[sse.Config]()
	} else {
		c.api, errs[0] = config.Defaults[httpapi.Config]()
		c.consumer, errs[1] = config.Defaults[ingest.Config]()
		c.scheduler, errs[2] = config.Defaults[promote.Config]()
		c.notifier, errs[3] = config.Defaults[sse.Config]()
	}
	return c, errors.Join(errs[:]...)
}

// apply sets what the stack's options ask for beyond where Kafka and Redis
// are: the tests' per-token buckets off, the page's target, the tick and
// flush intervals, the admin token and assertion settings, and the
// development keys of bypass codes and draws.
func (c *serviceConfigs) apply(o Options) error {
	if !o.Env {
		// The tests read a token's status, verify its admission and leave
		// every few ms, far past a page's pace (the per-token buckets);
		// make run keeps the service's defaults.
		c.api.Throttle.StatusRate, c.api.Throttle.LeaveRate, c.api.Throttle.AdmissionRate = 0, 0, 0
	}
	// One process, one profile: WR_PPROF_ADDR is the api's port here (the
	// whole stack's is WR_DEV_PPROF_ADDR), not bound four times.
	c.consumer.HTTP.PprofAddr, c.scheduler.HTTP.PprofAddr, c.notifier.HTTP.PprofAddr = "", "", ""
	// The page's "continue" leads to the demo shop, unless WR_PAGE_TARGET_URL says otherwise.
	c.api.PageTarget = or(c.api.PageTarget, shop.Target)
	if o.ProduceLinger > 0 {
		c.api.ProduceLinger = o.ProduceLinger
	}
	if o.Tick > 0 {
		c.scheduler.Tick = o.Tick
	}
	if o.SnapshotInterval != 0 {
		c.consumer.Snapshot.Interval = max(o.SnapshotInterval, 0)
	}
	if o.SeenFlush > 0 {
		c.api.SeenFlush, c.notifier.SeenFlush, c.scheduler.SeenFlush = o.SeenFlush, o.SeenFlush, o.SeenFlush
	}
	c.scheduler.AdminToken = or(o.AdminToken, c.scheduler.AdminToken)
	c.api.SignalToken = or(o.SignalToken, c.api.SignalToken)
	if o.SteerEvery > 0 {
		c.scheduler.SteerEvery = o.SteerEvery
	}
	if o.SteerMinStep > 0 {
		c.scheduler.SteerMinStep = o.SteerMinStep
	}
	if o.Assertion != nil {
		c.api.Assertion = *o.Assertion
	}
	// The dev stack's admin token may be its short built-in one, and its
	// schedulers serve the console on plain http.
	c.scheduler.DevKeys, c.scheduler.ConsoleSecureCookie = true, false
	// Bypass codes: the schedulers sign with the dev key unless configured;
	// the api verifies with its public half unless given its own.
	c.scheduler.BypassKey = or(c.scheduler.BypassKey, bypass.DevKey)
	if c.api.BypassPublicKey == "" {
		pub, err := bypass.PublicOf(c.scheduler.BypassKey)
		if err != nil {
			return fmt.Errorf("WR_BYPASS_KEY: %w", err)
		}
		c.api.BypassPublicKey = pub
	}
	c.scheduler.DrawKey = or(o.DrawKey, or(c.scheduler.DrawKey, DevDrawKey))
	return nil
}

// DevDrawKey is the development stack's WR_DRAW_KEY (draw.DevKey).
const DevDrawKey = draw.DevKey

// Stop stops every service and waits for them to drain.
func (s *Stack) Stop() error {
	s.cancel()
	errs := make([]error, s.running)
	for i := range errs {
		errs[i] = <-s.done
	}
	return errors.Join(errs...)
}

// Done reports the first service that stopped by itself.
func (s *Stack) Done() <-chan error { return s.done }

func wrap(name string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// PublishItems publishes item states to waitroom.items as the product service
// would, and waits for the broker.
func PublishItems(ctx context.Context, cl *kgo.Client, items ...topics.ItemState) error {
	recs := make([]*kgo.Record, len(items))
	for i := range items {
		items[i].V = topics.Version
		if err := items[i].Validate(); err != nil {
			return fmt.Errorf("item %s: %w", items[i].ItemID, err)
		}
		recs[i] = &kgo.Record{Topic: topics.Items, Key: []byte(items[i].ItemID), Value: topics.Encode(&items[i])}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("publish items: %w", err)
	}
	return nil
}

// DemoItems are what a product service would have published, for `make run`
// and `make cluster`. Version 1: a restart republishes them and the version
// check keeps any newer state.
func DemoItems() []topics.ItemState {
	now := time.Now().UnixMilli()
	p := topics.AdmissionPolicy{RatePerSecond: 5, MaxActive: 50, SessionTTLSeconds: 300}
	return []topics.ItemState{
		{ItemID: "concert-2026", Name: "Concert 2026, floor seats", Stock: 1000, Enabled: true, Policy: p, Version: 1, UpdatedAt: now},
		{ItemID: "sneaker-drop", Name: "Limited sneaker drop", Stock: 300, Enabled: true, Policy: p, Version: 1, UpdatedAt: now},
		{ItemID: "sold-out-demo", Name: "Already sold out", Stock: 0, Enabled: true, Policy: p, Version: 1, UpdatedAt: now},
		{ItemID: "closed-demo", Name: "Sale not open yet", Stock: 100, Enabled: false, Policy: p, Version: 1, UpdatedAt: now},
	}
}
