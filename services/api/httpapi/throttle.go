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

// ThrottleConfig sets the token buckets a registration passes at the door:
// one per client address and one per userId, shared by every api replica
// (they live in Redis). A rate of 0 turns a bucket off (the default).
type ThrottleConfig struct {
	IPRate    int           `env:"WR_THROTTLE_IP_RATE" envDefault:"0"`
	IPBurst   int           `env:"WR_THROTTLE_IP_BURST" envDefault:"0"`
	UserRate  int           `env:"WR_THROTTLE_USER_RATE" envDefault:"0"`
	UserBurst int           `env:"WR_THROTTLE_USER_BURST" envDefault:"0"`
	Period    time.Duration `env:"WR_THROTTLE_PERIOD" envDefault:"1m"`
}

// Validate checks the buckets.
func (c ThrottleConfig) Validate() error {
	switch {
	case c.IPRate < 0 || c.IPBurst < 0 || c.UserRate < 0 || c.UserBurst < 0:
		return errors.New("WR_THROTTLE_IP_RATE, _IP_BURST, _USER_RATE and _USER_BURST must not be negative")
	case c.Period < time.Second:
		return fmt.Errorf("WR_THROTTLE_PERIOD must be at least 1s, not %s", c.Period)
	}
	return nil
}

func (c ThrottleConfig) limit(rate, burst int) redis_rate.Limit {
	if burst <= 0 {
		burst = rate
	}
	return redis_rate.Limit{Rate: rate, Burst: burst, Period: c.Period}
}

// Throttle answers whether a registration may pass its buckets. It fails
// open: when Redis cannot answer, the registration goes through (Kafka is
// the record; refusing people because the view's Redis is down would be
// worse than letting a flood through for a moment), and a metric counts it.
type Throttle struct {
	lim       *redis_rate.Limiter
	ip, user  redis_rate.Limit
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
}

// maxEmpty bounds the remembered empty buckets; a full map is cleared.
const maxEmpty = 100_000

// NewThrottle returns the throttle of cfg over rdb (nil when every bucket is
// off); its metrics go on reg.
func NewThrottle(rdb redis.Cmdable, cfg ThrottleConfig, reg prometheus.Registerer, log *zap.Logger) *Throttle {
	if cfg.IPRate == 0 && cfg.UserRate == 0 {
		return nil
	}
	t := &Throttle{lim: redis_rate.NewLimiter(rdb), ip: cfg.limit(cfg.IPRate, cfg.IPBurst), user: cfg.limit(cfg.UserRate, cfg.UserBurst),
		timeout: 200 * time.Millisecond, log: log, empty: map[string]time.Time{}, now: time.Now,
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "waitroom_api_throttled_total",
			Help: "Registrations refused 429 RATE_LIMITED at the door, by bucket (ip, user)."}, []string{"by"}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_api_throttle_errors_total",
			Help: "Throttle checks Redis could not answer (the registration was let through)."}),
	}
	reg.MustRegister(t.throttled, t.failed)
	return t
}

// Allow takes one token from the bucket of kind ("ip" or "user") for key;
// when none is left it returns false and how long until one is.
func (t *Throttle) Allow(ctx context.Context, kind, key string) (bool, time.Duration) {
	if t == nil || key == "" {
		return true, 0
	}
	limit := t.ip
	if kind == "user" {
		limit = t.user
	}
	if limit.Rate == 0 {
		return true, 0
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
		t.log.Debug("throttle check failed: letting the registration through", zap.String("by", kind), zap.Error(err))
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
