package httpapi

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"go.uber.org/zap"
)

// A bucket Redis said is empty is refused from memory until its retry time,
// without asking Redis (a flood's refusals cost no round trip), and asked
// again after it.
func TestThrottleRemembersEmptyBuckets(t *testing.T) {
	rdb := testenv.Redis(t)
	th := NewThrottle(rdb, ThrottleConfig{IPRate: 60, IPBurst: 1, Period: time.Minute}, prometheus.NewRegistry(), zap.NewNop())
	now := time.Now()
	th.now = func() time.Time { return now }
	ctx := context.Background()
	if ok, _ := th.Allow(ctx, "ip", "192.0.2.1"); !ok {
		t.Fatal("the first registration is refused")
	}
	ok, wait := th.Allow(ctx, "ip", "192.0.2.1")
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("second: ok=%v wait=%s, want refused for up to 1 s", ok, wait)
	}
	// Redis loses the bucket (redis_rate prefixes its keys "rate:"): the
	// memory still refuses until the retry time.
	if err := rdb.Del(ctx, "rate:wr:throttle:ip:192.0.2.1").Err(); err != nil {
		t.Fatal(err)
	}
	now = now.Add(wait / 2)
	if ok, w := th.Allow(ctx, "ip", "192.0.2.1"); ok || w <= 0 || w > wait/2+time.Millisecond {
		t.Fatalf("within the retry time: ok=%v wait=%s, want refused from memory", ok, w)
	}
	// Past it, Redis is asked again (and, having lost the bucket, lets it in).
	now = now.Add(wait)
	if ok, _ := th.Allow(ctx, "ip", "192.0.2.1"); !ok {
		t.Fatal("past the retry time: still refused")
	}
	if ok, _ := th.Allow(ctx, "ip", "192.0.2.2"); !ok {
		t.Fatal("another address is refused")
	}
}
