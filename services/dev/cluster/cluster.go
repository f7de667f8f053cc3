// Package cluster runs waitroom in its production shape on one machine: every
// service as its own OS process from its own binary, configured only by its
// environment, against Kafka as a process of its own (waitroom-kafka: kfake
// with three brokers and a data dir), a real redis-server with appendonly on,
// and Caddy as the front door balancing the api and notifier replicas.
// With Options.Isolate each service runs in a network namespace of its own,
// every link of it through a fault-injecting Link. `make cluster` and the
// chaos suite (package chaos) use it.
package cluster

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/services/dev/stack"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Options of a cluster.
type Options struct {
	// Bin holds the binaries (make build): waitroom-kafka, waitroom-api,
	// waitroom-consumer, waitroom-scheduler, waitroom-notifier, waitroomctl.
	Bin string
	// Dir holds the data (kafka/, redis/) and the logs (logs/).
	Dir string
	// Base is the first port; the processes take Base+offsets (see Ports).
	Base int
	// APIs, Consumers, Schedulers, Notifiers: replicas (2, 2, 3, 2).
	APIs, Consumers, Schedulers, Notifiers int
	// Items are published to waitroom.items once Kafka is up (a product
	// service's part); none: the demo items.
	Items []topics.ItemState
	// Env is added to every service's environment (e.g. WR_LOG_LEVEL=warn).
	Env []string
	// ProcEnv is added to one service's environment, by its name (api-1,
	// scheduler-2, ...), after Env: the chaos suite's clock offsets.
	ProcEnv map[string][]string
	// Isolate runs every service in a network namespace of its own whose
	// only ways out and in are Links (see Netns, ProcNet): to each Kafka
	// broker, to Redis, and from the front door to its HTTP listener. It
	// needs root. Off: only each consumer's Redis link is a Link.
	Isolate bool
	// Sentinel runs Redis as a primary, a replica and three Sentinels
	// (quorum 2, a primary judged down after 1 s), the services reaching the
	// primary through the Sentinels (WR_REDIS_MODE=sentinel).
	Sentinel bool
	// RedisCluster runs Redis as a Redis Cluster of three masters without
	// replicas (rediscluster.go), the services reaching it with
	// WR_REDIS_MODE=cluster: a master can be restarted empty (RestartEmpty).
	RedisCluster bool
	// Pprof gives every service WR_PPROF_ADDR, its own port 100 above its
	// HTTP one (inside its namespace when isolated): heap and CPU profiles of
	// a long run.
	Pprof bool
	Log   *zap.Logger
}

// SentinelMaster is the name the Sentinels of a cluster watch the primary by.
const SentinelMaster = "waitroom"

// Ports of a cluster, from Base.
const (
	offFront     = 0   // Caddy
	offKafka     = 92  // three brokers: +92, +93, +94
	offAPI       = 10  // +10, +11, ...
	offConsumer  = 20  // +20, +21, ...
	offScheduler = 30  // +30, +31, ...
	offNotifier  = 40  // +40, +41, ...
	offRedis     = 79  // redis-server
	offProxy     = 80  // the consumers' cuttable links to Redis, +80, +81, ...
	offReplica   = 78  // Sentinel mode: the replica
	offSentinel  = 70  // Sentinel mode: three Sentinels, +70, +71, +72
	offPprof     = 100 // Options.Pprof: a service's pprof port, 100 above its HTTP one
	maxReplicas  = 9   // per kind, so the ranges above never overlap
	stopTimeout  = 15 * time.Second
	readyTimeout = 90 * time.Second
)

// Cluster is a running cluster.
type Cluster struct {
	opt Options
	log *zap.Logger

	Kafka *Proc
	Redis *Proc // the first primary (in Sentinel mode, the primary at start)
	// Sentinel mode: the replica (the first primary's) and the Sentinels.
	Replica    *Proc
	Sentinels  []*Proc
	RedisNodes []*Proc // Redis Cluster mode: the masters, the first being Redis
	APIs       []*Proc
	Consumers  []*Proc
	Schedulers []*Proc
	Notifiers  []*Proc
	Front      *Proc
	// RedisLinks carry each consumer's connections to Redis (Cut/Heal), in
	// the order of Consumers.
	RedisLinks []*Link

	URL        string // the front door
	Brokers    []string
	RedisAddr  string   // the first primary
	RedisAddrs []string // every Redis address a service may be sent to: the primary, and in Sentinel mode the replica and the Sentinels
	AdminToken string
}

// Start builds the processes' configuration, starts them in order (Kafka and
// Redis, the topics and items, the consumers, the schedulers, the apis and
// notifiers, the front door) and returns once every one is ready.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	c := &Cluster{opt: o, log: o.Log}
	if err := c.build(); err != nil {
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (o *Options) defaults() error {
	if o.Bin == "" {
		o.Bin = "bin"
	}
	if o.Base == 0 {
		o.Base = 19000
	}
	def := func(n *int, d int) {
		if *n <= 0 {
			*n = d
		}
	}
	def(&o.APIs, 2)
	def(&o.Consumers, 2)
	def(&o.Schedulers, 3)
	def(&o.Notifiers, 2)
	for _, n := range []int{o.APIs, o.Consumers, o.Schedulers, o.Notifiers} {
		if n > maxReplicas {
			return fmt.Errorf("at most %d replicas of a kind", maxReplicas)
		}
	}
	if o.Sentinel && o.RedisCluster {
		return errors.New("cluster: Redis behind Sentinel or a Redis Cluster, not both")
	}
	if o.Dir == "" {
		return errors.New("cluster: Options.Dir is required")
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	for _, b := range []string{"waitroom-kafka", "waitroom-api", "waitroom-consumer", "waitroom-scheduler", "waitroom-notifier", "waitroomctl"} {
		if _, err := os.Stat(filepath.Join(o.Bin, b)); err != nil {
			return fmt.Errorf("cluster: binary %s missing in %s (make build): %w", b, o.Bin, err)
		}
	}
	for _, tool := range []string{"redis-server", "caddy"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("cluster: %s not found on PATH (make deps installs it)", tool)
		}
	}
	return nil
}

func (c *Cluster) addr(off int) string { return "127.0.0.1:" + strconv.Itoa(c.opt.Base+off) }

// build lays out every process: its binary, its environment, its health URL.
func (c *Cluster) build() error {
	o := c.opt
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	c.opt.Dir = abs
	logs := filepath.Join(abs, "logs")
	bin := func(name string) string { p, _ := filepath.Abs(filepath.Join(o.Bin, name)); return p }

	tokenKey, admissionKey, adminToken, err := keys()
	if err != nil {
		return err
	}
	c.AdminToken = adminToken
	for i := 0; i < 3; i++ {
		c.Brokers = append(c.Brokers, c.addr(offKafka+i))
	}
	c.RedisAddr = c.addr(offRedis)
	c.URL = "http://" + c.addr(offFront)

	c.Kafka = &Proc{Name: "kafka", Kind: "kafka", Bin: bin("waitroom-kafka"), LogFile: filepath.Join(logs, "kafka.log"),
		ReadyAddr: c.Brokers[0], Env: []string{
			"WR_KAFKA_PORTS=" + ports(o.Base+offKafka, 3), "WR_KAFKA_DATA_DIR=" + filepath.Join(abs, "kafka")}}
	redisEnv, err := c.buildRedis(abs, logs)
	if err != nil {
		return err
	}
	c.buildServices(bin, logs, redisEnv, tokenKey, admissionKey, adminToken)
	if o.Isolate {
		for _, p := range c.Services() {
			p.Net = &ProcNet{NS: &Netns{Name: fmt.Sprintf("wr%d-%s", o.Base, p.Name)}}
			p.Bin, p.Args = p.Net.NS.Command(p.Bin, p.Args...)
		}
	}
	return c.buildFront(abs, logs)
}

// buildRedis lays out Redis (one server with its AOF; with o.Sentinel a
// primary, a replica and three Sentinels; with o.RedisCluster three masters)
// and returns the environment that points a service at it.
func (c *Cluster) buildRedis(abs, logs string) ([]string, error) {
	o := c.opt
	c.Redis = &Proc{Name: "redis", Kind: "redis", Bin: "redis-server", LogFile: filepath.Join(logs, "redis.log"),
		ReadyAddr: c.RedisAddr, Args: []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(o.Base + offRedis),
			"--dir", filepath.Join(abs, "redis"), "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
			"--daemonize", "no", "--protected-mode", "no"}}

	c.RedisAddrs = []string{c.RedisAddr}
	redisEnv := []string{"WR_REDIS_ADDR=" + c.RedisAddr}
	if o.Sentinel {
		if err := c.buildSentinel(abs, logs); err != nil {
			return nil, err
		}
		var sents []string
		for _, s := range c.Sentinels {
			sents = append(sents, s.ReadyAddr)
		}
		c.RedisAddrs = append(c.RedisAddrs, c.Replica.ReadyAddr)
		c.RedisAddrs = append(c.RedisAddrs, sents...)
		redisEnv = []string{"WR_REDIS_MODE=sentinel", "WR_REDIS_ADDRS=" + strings.Join(sents, ","), "WR_REDIS_SENTINEL_MASTER=" + SentinelMaster}
	}
	if o.RedisCluster {
		return c.buildRedisCluster(abs, logs)
	}
	return redisEnv, nil
}

// buildServices lays out the api, consumer, scheduler and notifier replicas.
func (c *Cluster) buildServices(bin func(string) string, logs string, redisEnv []string, tokenKey, admissionKey, adminToken string) {
	o := c.opt
	common := append([]string{"WR_KAFKA_BROKERS=" + strings.Join(c.Brokers, ","), "WR_LOG_FORMAT=json"}, o.Env...)
	svc := func(kind string, i int, off int, env ...string) *Proc {
		name := fmt.Sprintf("%s-%d", kind, i+1)
		addr := c.addr(off + i)
		e := append(append([]string{}, common...), env...)
		e = append(e, "WR_KAFKA_CLIENT_ID=waitroom-"+name)
		pprof := ""
		if o.Pprof {
			pprof = c.addr(off + i + offPprof)
			e = append(e, "WR_PPROF_ADDR="+pprof)
		}
		e = append(e, o.ProcEnv[name]...)
		return &Proc{Name: name, Kind: kind, Bin: bin("waitroom-" + kind), LogFile: filepath.Join(logs, name+".log"),
			Addr: addr, PprofAddr: pprof, Health: "http://" + addr + "/readyz", Env: append(e, "WR_"+strings.ToUpper(kind)+"_ADDR="+addr)}
	}
	keysEnv := []string{"WR_TOKEN_KEY=" + tokenKey, "WR_ADMISSION_KEY=" + admissionKey}
	// The apis sit behind the front door, which connects from loopback and
	// names the client in X-Forwarded-For.
	for i := range o.APIs {
		c.APIs = append(c.APIs, svc("api", i, offAPI, append(append([]string{"WR_TRUSTED_PROXIES=127.0.0.1/32"}, redisEnv...), keysEnv...)...))
	}
	for i := range o.Consumers {
		r := []string{"WR_REDIS_ADDR=" + c.addr(offProxy+i)} // a link the chaos suite can cut
		if o.Isolate || o.Sentinel || o.RedisCluster {
			r = redisEnv // inside its namespace, that address is a link
		}
		c.Consumers = append(c.Consumers, svc("consumer", i, offConsumer, append(append([]string{}, r...),
			fmt.Sprintf("WR_CONSUMER_INSTANCE_ID=consumer-%d", i+1))...))
	}
	for i := range o.Schedulers {
		c.Schedulers = append(c.Schedulers, svc("scheduler", i, offScheduler, append(append([]string{}, redisEnv...), "WR_ADMIN_TOKEN="+adminToken)...))
	}
	for i := range o.Notifiers {
		c.Notifiers = append(c.Notifiers, svc("notifier", i, offNotifier, append(append([]string{}, redisEnv...), keysEnv...)...))
	}
}

// buildFront writes the front door's Caddyfile and lays out Caddy.
func (c *Cluster) buildFront(abs, logs string) error {
	caddyfile := filepath.Join(abs, "Caddyfile")
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(caddyfile, []byte(c.caddyfile()), 0o644); err != nil {
		return fmt.Errorf("write the front door's Caddyfile: %w", err)
	}
	c.Front = &Proc{Name: "front", Kind: "front", Bin: "caddy", LogFile: filepath.Join(logs, "front.log"),
		Args: []string{"run", "--config", caddyfile, "--adapter", "caddyfile"}, ReadyAddr: c.addr(offFront),
		Env: []string{"XDG_DATA_HOME=" + filepath.Join(abs, "caddy"), "XDG_CONFIG_HOME=" + filepath.Join(abs, "caddy")}}
	return nil
}

// caddyfile is the front door: as deploy/compose/Caddyfile (/metrics answered
// 404 by the door, the event streams to the notifiers, the rest to the apis),
// on loopback ports, and retrying a request on another replica when one is down (a
// refused connection never reached it, so even a POST is safe to retry).
// Health is /healthz, the process being alive, not /readyz: while the Redis
// view is rebuilt every replica is not ready, yet registrations must still
// reach an api and get their 202.
func (c *Cluster) caddyfile() string {
	ups := func(ps []*Proc) string {
		var s []string
		for _, p := range ps {
			s = append(s, p.Addr)
		}
		return strings.Join(s, " ")
	}
	return fmt.Sprintf(`{
	admin off
	auto_https off
}

http://:%[4]d {
	bind 127.0.0.1
	@metrics path /metrics /metrics/*
	handle @metrics {
		header Content-Type application/json
		respond `+"`"+`{"error":{"code":"NOT_FOUND","message":"no route /metrics"}}`+"`"+` 404
	}
	@events path_regexp events ^/api/v1/items/[^/]+/registrations/[^/]+/events$
	handle @events {
		reverse_proxy %[2]s {
			flush_interval -1
			lb_policy least_conn
			lb_try_duration 5s
			lb_try_interval 100ms
			fail_duration 2s
			health_uri /healthz
			health_interval 1s
		}
	}
	handle {
		reverse_proxy %[3]s {
			lb_policy round_robin
			lb_try_duration 5s
			lb_try_interval 100ms
			fail_duration 2s
			health_uri /healthz
			health_interval 1s
		}
	}
}
`, c.addr(offFront), ups(c.Notifiers), ups(c.APIs), c.opt.Base+offFront)
}

func (c *Cluster) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := os.MkdirAll(filepath.Join(c.opt.Dir, "redis"), 0o755); err != nil {
		return err
	}
	for _, p := range []*Proc{c.Kafka, c.Redis} {
		if err := c.startReady(ctx, p); err != nil {
			return err
		}
	}
	if c.opt.Sentinel {
		if err := c.startSentinel(ctx); err != nil {
			return err
		}
	}
	if c.opt.RedisCluster {
		if err := c.startRedisCluster(ctx); err != nil {
			return err
		}
	}
	if c.opt.Isolate {
		for _, p := range c.Services() {
			if err := c.isolate(ctx, p); err != nil {
				return err
			}
		}
		for _, p := range c.Consumers {
			c.RedisLinks = append(c.RedisLinks, p.Net.Redis)
		}
	} else {
		for i := range c.Consumers {
			l, err := NewProxy(c.addr(offProxy+i), c.RedisAddr)
			if err != nil {
				return fmt.Errorf("listen for %s's Redis link: %w", c.Consumers[i].Name, err)
			}
			c.RedisLinks = append(c.RedisLinks, l)
		}
	}
	if err := c.ensureTopics(ctx); err != nil {
		return err
	}
	for _, group := range [][]*Proc{c.Consumers, c.Schedulers, c.APIs, c.Notifiers, {c.Front}} {
		for _, p := range group {
			if err := p.Start(); err != nil {
				return err
			}
		}
		for _, p := range group {
			if err := p.Ready(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Cluster) startReady(ctx context.Context, p *Proc) error {
	if err := p.Start(); err != nil {
		return err
	}
	return p.Ready(ctx)
}

// ensureTopics creates the topics with the operator's CLI and publishes the
// items, as the product service would.
func (c *Cluster) ensureTopics(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.opt.Bin, "waitroomctl"), "topics", "ensure")
	cmd.Env = append(os.Environ(), "WR_KAFKA_BROKERS="+strings.Join(c.Brokers, ","))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("waitroomctl topics ensure: %w\n%s", err, out)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	items := c.opt.Items
	if len(items) == 0 {
		items = stack.DemoItems()
	}
	return stack.PublishItems(ctx, cl, items...)
}

// Services lists the api, consumer, scheduler and notifier processes.
func (c *Cluster) Services() []*Proc {
	var ps []*Proc
	for _, g := range [][]*Proc{c.Consumers, c.Schedulers, c.APIs, c.Notifiers} {
		ps = append(ps, g...)
	}
	return ps
}

// All lists every process, in start order.
func (c *Cluster) All() []*Proc {
	ps := []*Proc{c.Kafka, c.Redis}
	if c.Replica != nil {
		ps = append(append(ps, c.Replica), c.Sentinels...)
	}
	if len(c.RedisNodes) > 1 {
		ps = append(ps, c.RedisNodes[1:]...)
	}
	ps = append(ps, c.Services()...)
	return append(ps, c.Front)
}

// Stop stops every process, the front first and Kafka and Redis last.
func (c *Cluster) Stop() error {
	var errs []error
	ps := c.All()
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i] != nil {
			errs = append(errs, ps[i].Stop(stopTimeout))
		}
	}
	if c.opt.Isolate {
		for _, p := range c.Services() {
			if p.Net != nil {
				errs = append(errs, p.Net.close())
			}
		}
		return errors.Join(errs...)
	}
	for _, l := range c.RedisLinks {
		l.Close()
	}
	return errors.Join(errs...)
}

// Restart starts p again and waits until it is ready.
func (c *Cluster) Restart(ctx context.Context, p *Proc) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return c.startReady(ctx, p)
}

// WipeRedis removes what redis-server keeps on disk (it must be stopped):
// the next start is empty, as after a failover to a replica that had nothing.
func (c *Cluster) WipeRedis() error {
	if c.Redis.Running() {
		return errors.New("wipe redis: it is running")
	}
	dir := filepath.Join(c.opt.Dir, "redis")
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("wipe redis: %w", err)
	}
	return os.MkdirAll(dir, 0o755)
}

// Dir is where the cluster keeps data and logs.
func (c *Cluster) Dir() string { return c.opt.Dir }

// keys makes fresh secrets for this cluster: the production services refuse
// to start on the development keys, and so does this cluster.
func keys() (token, admission, admin string, err error) {
	b := make([]byte, 32)
	if _, err = rand.Read(b); err != nil {
		return "", "", "", err
	}
	token = base64.StdEncoding.EncodeToString(b)
	seed := make([]byte, ed25519.SeedSize)
	if _, err = rand.Read(seed); err != nil {
		return "", "", "", err
	}
	admission = base64.StdEncoding.EncodeToString(seed)
	a := make([]byte, 32) // the schedulers refuse an admin token under 32 bytes
	if _, err = rand.Read(a); err != nil {
		return "", "", "", err
	}
	return token, admission, base64.RawURLEncoding.EncodeToString(a), nil
}

func ports(first, n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = strconv.Itoa(first + i)
	}
	return strings.Join(s, ",")
}

func dialOK(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
