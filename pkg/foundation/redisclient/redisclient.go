// Package redisclient opens the Redis client a config.Redis describes (one
// server, a primary behind Sentinel, or a Redis Cluster), so the env config
// itself compiles no Redis client.
package redisclient

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/foundation/config"
)

// New returns a client of the Redis r configures: a *redis.Client
// (single), a failover client that follows the Sentinels' primary
// (sentinel), or a *redis.ClusterClient (cluster), which routes each command
// by its key's slot. Callers keep every script and MULTI within one slot.
func New(r config.Redis) (redis.UniversalClient, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("redis client: %w", err)
	}
	tc, err := r.TLSConfig()
	if err != nil {
		return nil, fmt.Errorf("redis client: %w", err)
	}
	eps := r.Endpoints()
	switch r.Topology() {
	case config.RedisSentinel:
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: r.SentinelMaster, SentinelAddrs: eps,
			SentinelPassword: r.SentinelPassword, Username: r.Username, Password: r.Password, DB: r.DB,
			PoolSize: r.PoolSize, TLSConfig: tc}), nil
	case config.RedisCluster:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: eps, Username: r.Username, Password: r.Password,
			PoolSize: r.PoolSize, TLSConfig: tc}), nil
	default:
		return redis.NewClient(&redis.Options{Addr: eps[0], Username: r.Username, Password: r.Password, DB: r.DB,
			PoolSize: r.PoolSize, TLSConfig: tc}), nil
	}
}

// WaitClusterOK waits until every node of a Redis Cluster (addrs) says
// cluster_state:ok, with every slot served and all len(addrs) nodes known:
// what a cluster just created or a node just restarted must reach before it
// is used. It gives up when ctx ends.
func WaitClusterOK(ctx context.Context, addrs []string) error {
	for _, addr := range addrs {
		cl := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 500 * time.Millisecond})
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(addrs))+"\r") {
				break
			}
			select {
			case <-ctx.Done():
				_ = cl.Close()
				return fmt.Errorf("redis cluster on %s not ok: %v\n%s: %w", addr, err, info, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
		_ = cl.Close()
	}
	return nil
}
