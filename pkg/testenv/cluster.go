package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/config"
)

// TestRedisEnv chooses the Redis the tests built on RedisBackend (and Redis)
// run against: "single" (default, one redis-server) or "cluster" (a
// 3-master Redis Cluster on loopback). `make unit-cluster` sets it.
const TestRedisEnv = "WR_TEST_REDIS"

// ClusterMode reports whether WR_TEST_REDIS asks for a Redis Cluster.
func ClusterMode() bool { return strings.EqualFold(os.Getenv(TestRedisEnv), config.RedisCluster) }

// RedisBackend starts the Redis WR_TEST_REDIS names and returns the config a
// service would be given to reach it and a client of it (closed when the
// test ends).
func RedisBackend(t testing.TB) (config.Redis, redis.UniversalClient) {
	t.Helper()
	switch v := strings.ToLower(os.Getenv(TestRedisEnv)); v {
	case "", config.RedisSingle:
		s := StartRedis(t)
		return config.Redis{Mode: config.RedisSingle, Addr: s.Addr, PoolSize: 32}, s.Client()
	case config.RedisCluster:
		c := StartRedisCluster(t, 3)
		return c.Config(), c.Client()
	default:
		t.Fatalf("%s=%q: want single or cluster", TestRedisEnv, v)
		return config.Redis{}, nil
	}
}

// RedisCluster is a Redis Cluster of masters without replicas, each a
// redis-server of the test's own.
type RedisCluster struct {
	Addrs []string
	Nodes []*RedisServer
	t     testing.TB
}

// StartRedisCluster starts masters redis-servers with cluster mode on, on
// loopback, joins them with `redis-cli --cluster create` (the slots spread
// evenly) and waits until every node says cluster_state:ok. The servers are
// killed when the test ends.
func StartRedisCluster(t testing.TB, masters int) *RedisCluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli not found on PATH (apt-get install redis-tools): %v", err)
	}
	c := &RedisCluster{t: t}
	for range masters {
		n := startClusterNode(t)
		c.Nodes = append(c.Nodes, n)
		c.Addrs = append(c.Addrs, n.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append(append([]string{"--cluster", "create"}, c.Addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create %s: %v\n%s", strings.Join(c.Addrs, " "), err, out)
	}
	if err := c.waitOK(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// startClusterNode starts one cluster-enabled redis-server on a port whose
// cluster bus port (port + 10000) was free too.
func startClusterNode(t testing.TB) *RedisServer {
	t.Helper()
	for range 20 {
		port := FreePort(t)
		if port+10000 > 65535 || !portFree(port+10000) {
			continue
		}
		s := &RedisServer{t: t, port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: t.TempDir(),
			Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "3000"}}
		err := s.launch()
		if errors.Is(err, errExited) {
			continue
		}
		if err != nil {
			t.Fatalf("start a cluster node: %v", err)
		}
		t.Cleanup(s.Stop)
		return s
	}
	t.Fatal("start a cluster node: no free port pair (port, port+10000) found")
	return nil
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// waitOK waits until every node sees the whole cluster with every slot served.
func (c *RedisCluster) waitOK(ctx context.Context) error {
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		var info string
		var err error
		for {
			info, err = cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Nodes))+"\r") {
				break
			}
			if ctx.Err() != nil {
				_ = cl.Close()
				return fmt.Errorf("redis cluster on %s not ok: %v\n%s", n.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = cl.Close()
	}
	return nil
}

// Config is how a service reaches the cluster.
func (c *RedisCluster) Config() config.Redis {
	return config.Redis{Mode: config.RedisCluster, Addrs: append([]string(nil), c.Addrs...), PoolSize: 32}
}

// Client returns a cluster client, closed when the test ends.
func (c *RedisCluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, PoolSize: 32})
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}
