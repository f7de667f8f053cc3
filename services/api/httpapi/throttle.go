package httpapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// ThrottleConfig sets the token buckets, shared by every api replica (they
// live in Redis). A rate of 0 turns a bucket off; a burst of 0 is the rate.
//
// Registrations (per WR_THROTTLE_PERIOD, off by default): per client address
// (an IPv4 address or an IPv6 /64, and a wider bucket per IPv6 /48), and per
// userId. The other calls (per second): per token, on by default at paces a
// page never reaches (it polls at most once a second), and per client
// address for status, leave and challenge, off by default (a carrier's NAT
// puts thousands of real people behind one IPv4 address).
type ThrottleConfig struct {
	IPRate    int `env:"WR_THROTTLE_IP_RATE" envDefault:"0"`
	IPBurst   int `env:"WR_THROTTLE_IP_BURST" envDefault:"0"`
	IP48Rate  int `env:"WR_THROTTLE_IP48_RATE" envDefault:"0"` // 0: wideFactor × IPRate
	IP48Burst int `env:"WR_THROTTLE_IP48_BURST" envDefault:"0"`
	UserRate  int `env:"WR_THROTTLE_USER_RATE" envDefault:"0"`
	UserBurst int `env:"WR_THROTTLE_USER_BURST" envDefault:"0"`
	// Period is the period of the registrations' rates.
	Period time.Duration `env:"WR_THROTTLE_PERIOD" envDefault:"1m"`

	StatusRate     int `env:"WR_THROTTLE_STATUS_RATE" envDefault:"5"`
	StatusBurst    int `env:"WR_THROTTLE_STATUS_BURST" envDefault:"10"`
	LeaveRate      int `env:"WR_THROTTLE_LEAVE_RATE" envDefault:"1"`
	LeaveBurst     int `env:"WR_THROTTLE_LEAVE_BURST" envDefault:"3"`
	AdmissionRate  int `env:"WR_THROTTLE_ADMISSION_RATE" envDefault:"5"`
	AdmissionBurst int `env:"WR_THROTTLE_ADMISSION_BURST" envDefault:"10"`
	CallIPRate     int `env:"WR_THROTTLE_CALL_IP_RATE" envDefault:"0"`
	CallIPBurst    int `env:"WR_THROTTLE_CALL_IP_BURST" envDefault:"0"`
	CallIP48Rate   int `env:"WR_THROTTLE_CALL_IP48_RATE" envDefault:"0"` // 0: wideFactor × CallIPRate
	CallIP48Burst  int `env:"WR_THROTTLE_CALL_IP48_BURST" envDefault:"0"`
}

// wideFactor is how much more an IPv6 /48 may send than one /64 of it when
// its own rate is not set: a site's few links, not its 65,536.
const wideFactor = 16

// The buckets' kinds: the "by" of RATE_LIMITED and of the metric.
const (
	byIP        = "ip"        // registrations per IPv4 address or IPv6 /64
	byIP48      = "ip48"      // registrations per IPv6 /48
	byUser      = "user"      // registrations per userId
	byCallIP    = "call-ip"   // status, leave and challenge per IPv4 address or IPv6 /64
	byCallIP48  = "call-ip48" // the same per IPv6 /48
	byStatus    = "status"    // status reads per queue token
	byLeave     = "leave"     // leaves per queue token
	byAdmission = "admission" // verify and complete per admission token
)

// Validate checks the buckets.
func (c ThrottleConfig) Validate() error {
	for _, n := range []int{c.IPRate, c.IPBurst, c.IP48Rate, c.IP48Burst, c.UserRate, c.UserBurst,
		c.StatusRate, c.StatusBurst, c.LeaveRate, c.LeaveBurst, c.AdmissionRate, c.AdmissionBurst,
		c.CallIPRate, c.CallIPBurst, c.CallIP48Rate, c.CallIP48Burst} {
		if n < 0 {
			return errors.New("WR_THROTTLE_*_RATE and WR_THROTTLE_*_BURST must not be negative")
		}
	}
	if c.Period < time.Second {
		return fmt.Errorf("WR_THROTTLE_PERIOD must be at least 1s, not %s", c.Period)
	}
	return nil
}

// limits returns every bucket that is on, by kind.
func (c ThrottleConfig) limits() map[string]redis_rate.Limit {
	out := map[string]redis_rate.Limit{}
	add := func(kind string, rate, burst int, period time.Duration) {
		if rate <= 0 {
			return
		}
		if burst <= 0 {
			burst = rate
		}
		out[kind] = redis_rate.Limit{Rate: rate, Burst: burst, Period: period}
	}
	wide := func(rate, burst, narrowRate, narrowBurst int) (int, int) {
		if rate > 0 {
			return rate, burst
		}
		return wideFactor * narrowRate, wideFactor * max(narrowBurst, narrowRate)
	}
	add(byIP, c.IPRate, c.IPBurst, c.Period)
	r, b := wide(c.IP48Rate, c.IP48Burst, c.IPRate, c.IPBurst)
	add(byIP48, r, b, c.Period)
	add(byUser, c.UserRate, c.UserBurst, c.Period)
	add(byStatus, c.StatusRate, c.StatusBurst, time.Second)
	add(byLeave, c.LeaveRate, c.LeaveBurst, time.Second)
	add(byAdmission, c.AdmissionRate, c.AdmissionBurst, time.Second)
	add(byCallIP, c.CallIPRate, c.CallIPBurst, time.Second)
	r, b = wide(c.CallIP48Rate, c.CallIP48Burst, c.CallIPRate, c.CallIPBurst)
	add(byCallIP48, r, b, time.Second)
	return out
}

// Throttle answers whether a call may pass its buckets. It fails open: when
// Redis cannot answer, the call goes through (Kafka is the record; refusing
// people because the view's Redis is down would be worse than letting a
// flood through for a moment), and a metric counts it.
type Throttle struct {
	lim       *redis_rate.Limiter
	limits    map[string]redis_rate.Limit // read-only after NewThrottle
	timeout   time.Duration
	throttled *prometheus.CounterVec
	failed    prometheus.Counter
	log       *zap.Logger

	// empty remembers, per bucket, until when Redis said it holds no token:
	// a flood's refusals until then cost no Redis round trip. Exact, not a
	// guess: no token can appear before that time on any replica.
	mu    sync.Mutex
	empty map[string]time.Time
	now   func() time.Time

	// mem are the buckets of the kinds kept in memory (memKinds).
	mem map[string]*memBuckets
}

// memKinds are the per-token buckets kept in each replica's memory: status
// reads, which write nothing to the record (leaves and admissions do, so
// their buckets are shared by every replica, in Redis).
var memKinds = map[string]bool{byStatus: true}

// maxEmpty bounds the remembered empty buckets; a full map is cleared.
const maxEmpty = 100_000

// NewThrottle returns the throttle of cfg over rdb (nil when every bucket is
// off); its metrics go on reg.
func NewThrottle(rdb redis.Cmdable, cfg ThrottleConfig, reg prometheus.Registerer, log *zap.Logger) *Throttle {
	limits := cfg.limits()
	if len(limits) == 0 {
		return nil
	}
	t := &Throttle{lim: redis_rate.NewLimiter(rdb), limits: limits,
		timeout: 200 * time.Millisecond, log: log, empty: map[string]time.Time{}, now: time.Now,
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "waitroom_api_throttled_total",
			Help: "Calls refused 429 RATE_LIMITED, by bucket (registrations: ip, ip48, user; per token: status, leave, admission; other calls per address: call-ip, call-ip48)."},
			[]string{"by"}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_api_throttle_errors_total",
			Help: "Throttle checks Redis could not answer (the call was let through)."}),
	}
	for kind, l := range limits {
		if memKinds[kind] {
			if t.mem == nil {
				t.mem = map[string]*memBuckets{}
			}
			t.mem[kind] = newMemBuckets(l, maxMemBuckets)
		}
	}
	reg.MustRegister(t.throttled, t.failed)
	return t
}

// Allow takes one token from the bucket of kind (the by* names: "ip",
// "user", "status", …) for key; when none is left it returns false and how
// long until one is. A bucket that is off, or an empty key, always allows.
// Costs one Redis round trip, none while the bucket is known empty.
func (t *Throttle) Allow(ctx context.Context, kind, key string) (bool, time.Duration) {
	if t == nil || key == "" {
		return true, 0
	}
	limit, on := t.limits[kind]
	if !on {
		return true, 0
	}
	if b := t.mem[kind]; b != nil {
		ok, wait := b.allow(key, t.now())
		if !ok {
			t.throttled.WithLabelValues(kind).Inc()
		}
		return ok, wait
	}
	bucket := "wr:throttle:" + kind + ":" + key
	now := t.now()
	t.mu.Lock()
	until, ok := t.empty[bucket]
	if ok && !now.Before(until) {
		delete(t.empty, bucket)
	}
	t.mu.Unlock()
	if ok && now.Before(until) {
		t.throttled.WithLabelValues(kind).Inc()
		return false, until.Sub(now)
	}
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	res, err := t.lim.Allow(ctx, bucket, limit)
	if err != nil {
		t.failed.Inc()
		t.log.Debug("throttle check failed: letting the call through", zap.String("by", kind), zap.Error(err))
		return true, 0
	}
	if res.Allowed > 0 {
		return true, 0
	}
	t.throttled.WithLabelValues(kind).Inc()
	if res.RetryAfter > 0 {
		t.mu.Lock()
		if len(t.empty) >= maxEmpty {
			clear(t.empty)
		}
		t.empty[bucket] = now.Add(res.RetryAfter)
		t.mu.Unlock()
	}
	return false, res.RetryAfter
}

// memBucket is the in-memory buckets of kind (nil: off, in Redis, or no
// throttle), for a caller that keeps their state itself (positions.useBucket).
func (t *Throttle) memBucket(kind string) *memBuckets {
	if t == nil {
		return nil
	}
	return t.mem[kind]
}

// refused counts a call refused by the bucket of kind kept by its caller.
func (t *Throttle) refused(kind string) { t.throttled.WithLabelValues(kind).Inc() }

// addrOn reports whether the address bucket kind or wide is on, so a caller
// reads the client's address only when a bucket will use it.
func (t *Throttle) addrOn(kind, wide string) bool {
	if t == nil {
		return false
	}
	_, on := t.limits[kind]
	_, wideOn := t.limits[wide]
	return on || wideOn
}

// AllowAddr takes one token from each address bucket of the client address
// ip (addressKeys): kind for the IPv4 address or the IPv6 /64, wide for the
// IPv6 /48, narrow first. When one is empty it returns false, its kind, and
// how long until it has a token again.
func (t *Throttle) AllowAddr(ctx context.Context, kind, wide, ip string) (ok bool, by string, wait time.Duration) {
	if t == nil {
		return true, "", 0
	}
	if _, on := t.limits[kind]; !on {
		if _, on := t.limits[wide]; !on {
			return true, "", 0 // both off: not even the address parsed
		}
	}
	narrowKey, wideKey := addressKeys(ip)
	if ok, wait := t.Allow(ctx, kind, narrowKey); !ok {
		return false, kind, wait
	}
	if ok, wait := t.Allow(ctx, wide, wideKey); !ok {
		return false, wide, wait
	}
	return true, "", 0
}
