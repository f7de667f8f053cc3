package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/foundation/config"
)

// SentinelMaster is the master name SentinelRedis's Sentinel watches.
const SentinelMaster = "waitroom"

// SentinelRedis is a primary, one replica of it and one Sentinel watching
// them (quorum 1, the primary judged down after 1 s), each a redis-server of
// the test's own.
type SentinelRedis struct {
	Primary, Replica, Sentinel *RedisServer
	t                          testing.TB
}

// StartSentinel starts the three and waits until the replica is in sync and
// the Sentinel knows it, so a kill of the primary is followed by a failover.
// They are killed when the test ends.
func StartSentinel(t testing.TB) *SentinelRedis {
	t.Helper()
	s := &SentinelRedis{t: t, Primary: StartRedis(t)}
	s.Replica = startWith(t, func(r *RedisServer) {
		r.Args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(s.Primary.port)}
	})
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 1\nsentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\nsentinel parallel-syncs %[1]s 1\n", SentinelMaster, s.Primary.port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatalf("write sentinel.conf: %v", err)
	}
	s.Sentinel = startWith(t, func(r *RedisServer) { r.sentinelConf = conf })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr})
	defer sc.Close()
	pc := redis.NewClient(&redis.Options{Addr: s.Primary.Addr})
	defer pc.Close()
	for {
		info, _ := pc.Info(ctx, "replication").Result()
		reps, _ := sc.Replicas(ctx, SentinelMaster).Result()
		if strings.Contains(info, "state=online") && len(reps) == 1 {
			return s
		}
		if ctx.Err() != nil {
			t.Fatalf("sentinel setup: replica not in sync or not known to the Sentinel: %s / %v", info, reps)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Config is how a service reaches the primary through the Sentinel.
func (s *SentinelRedis) Config() config.Redis {
	return config.Redis{Mode: config.RedisSentinel, Addrs: []string{s.Sentinel.Addr}, SentinelMaster: SentinelMaster, PoolSize: 32}
}

// Client returns a failover client (it follows the Sentinel's primary),
// closed when the test ends.
func (s *SentinelRedis) Client() redis.UniversalClient {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: []string{s.Sentinel.Addr}, PoolSize: 32})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// PrimaryAddr asks the Sentinel which server is the primary now.
func (s *SentinelRedis) PrimaryAddr(ctx context.Context) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", fmt.Errorf("ask the sentinel for the primary: %w", err)
	}
	return a[0] + ":" + a[1], nil
}
