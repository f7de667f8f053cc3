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
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/redisclient"
)

// TestRedisEnv chooses the Redis the tests built on RedisBackend (and Redis)
// run against: "single" (default, one redis-server) or "cluster" (a
// 3-master Redis Cluster on loopback). `make unit-cluster` sets it.
const TestRedisEnv = "WR_TEST_REDIS"

// ClusterMode reports whether WR_TEST_REDIS asks for a Redis Cluster.
func ClusterMode() bool { return strings.EqualFold(os.Getenv(TestRedisEnv), config.RedisCluster) }

// RedisBackend starts the Redis WR_TEST_REDIS names and returns the config a
// service would be given to reach it and a client of it (closed when the
// test ends). In a package whose TestMain runs its tests under Main, the
// cluster is the package's shared one, emptied for the test.
func RedisBackend(t testing.TB) (config.Redis, redis.UniversalClient) {
	t.Helper()
	switch v := strings.ToLower(os.Getenv(TestRedisEnv)); v {
	case "", config.RedisSingle:
		s := StartRedis(t)
		return config.Redis{Mode: config.RedisSingle, Addr: s.Addr, PoolSize: 32}, s.Client()
	case config.RedisCluster:
		if shared != nil {
			return shared.Config(), shared.emptied(t)
		}
		c := StartRedisCluster(t, 3)
		return c.Config(), c.Client()
	default:
		t.Fatalf("%s=%q: want single or cluster", TestRedisEnv, v)
		return config.Redis{}, nil
	}
}

// shared is the Redis Cluster every test of the package shares, when its
// TestMain runs them under Main in cluster mode.
var shared *RedisCluster

// Main runs a package's tests; call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
//
// Under WR_TEST_REDIS=cluster it starts one 3-master Redis Cluster before
// the tests and stops it after them, and RedisBackend (and Redis) hands each
// test that cluster emptied (FLUSHALL and SCRIPT FLUSH on every master)
// instead of starting one of its own: a new cluster's masters only turn
// writable two seconds after they start, which was most of each test. Use it
// only in packages whose tests leave nothing running against Redis once they
// end (no t.Parallel, no goroutine outliving its test): the next test shares
// the servers.
func Main(m *testing.M) int {
	if !ClusterMode() {
		return m.Run()
	}
	c, stop, err := newCluster(3)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	defer stop()
	shared = c
	defer func() { shared = nil }()
	return m.Run()
}

// emptied empties the cluster and returns a client of it, closed when the
// test ends.
func (c *RedisCluster) emptied(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, PoolSize: 32})
	t.Cleanup(func() { _ = cl.Close() })
	err := cl.ForEachMaster(t.Context(), func(ctx context.Context, n *redis.Client) error {
		if err := n.FlushAll(ctx).Err(); err != nil {
			return err
		}
		return n.ScriptFlush(ctx).Err()
	})
	if err != nil {
		t.Fatalf("empty the shared redis cluster: %v", err)
	}
	return cl
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
	c, stop, err := newCluster(masters)
	if stop != nil {
		t.Cleanup(stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	c.t = t
	for _, n := range c.Nodes {
		n.t = t
	}
	return c
}

// newCluster starts and joins a cluster; stop (set even with an error, when
// something was started) kills its servers and removes their directories.
func newCluster(masters int) (c *RedisCluster, stop func(), err error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, nil, fmt.Errorf("redis-cli not found on PATH (apt-get install redis-tools): %w", err)
	}
	c = &RedisCluster{}
	stop = func() {
		for _, n := range c.Nodes {
			n.Stop()
			_ = os.RemoveAll(n.Dir)
		}
	}
	for range masters {
		n, err := newClusterNode()
		if err != nil {
			return nil, stop, err
		}
		c.Nodes = append(c.Nodes, n)
		c.Addrs = append(c.Addrs, n.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append(append([]string{"--cluster", "create"}, c.Addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return nil, stop, fmt.Errorf("redis-cli --cluster create %s: %w\n%s", strings.Join(c.Addrs, " "), err, out)
	}
	if err := redisclient.WaitClusterOK(ctx, c.Addrs); err != nil {
		return nil, stop, err
	}
	return c, stop, nil
}

// newClusterNode starts one cluster-enabled redis-server on a port whose
// cluster bus port (port + 10000) was free too, in a directory of its own.
func newClusterNode() (*RedisServer, error) {
	for range 20 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		if port+10000 > 65535 || !portFree(port+10000) {
			continue
		}
		dir, err := os.MkdirTemp("", "waitroom-cluster-node-")
		if err != nil {
			return nil, fmt.Errorf("start a cluster node: %w", err)
		}
		s := &RedisServer{port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir,
			Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "3000"}}
		err = s.launch()
		if err == nil {
			return s, nil
		}
		_ = os.RemoveAll(dir)
		if !errors.Is(err, errExited) {
			return nil, fmt.Errorf("start a cluster node: %w", err)
		}
	}
	return nil, errors.New("start a cluster node: no free port pair (port, port+10000) found")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
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
