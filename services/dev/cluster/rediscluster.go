package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/foundation/redisclient"
)

// Redis Cluster mode (Options.RedisCluster): three masters without
// replicas, the first at offRedis (Cluster.Redis), the others at
// offRedisNodes; their cluster buses at offRedisBuses (not the port +
// 10000 Redis defaults to: the cluster keeps to its own hundred ports).
var (
	offRedisNodes = []int{offRedis, 76, 77}
	offRedisBuses = []int{73, 74, 75}
)

// buildRedisCluster lays out Redis Cluster mode's masters, each in a data
// directory of its own that keeps only its nodes.conf (no AOF, no RDB): a
// master killed and started again is the same node with the same slots,
// holding nothing (RestartEmpty). It returns the services' Redis settings.
func (c *Cluster) buildRedisCluster(abs, logs string) ([]string, error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, errors.New("cluster: redis-cli not found on PATH (it joins the Redis Cluster's masters)")
	}
	c.RedisNodes = nil
	c.RedisAddrs = nil
	for i, off := range offRedisNodes {
		name, dir := "redis", filepath.Join(abs, "redis")
		if i > 0 {
			name = fmt.Sprintf("redis-%d", i+1)
			dir = filepath.Join(abs, name)
		}
		p := &Proc{Name: name, Kind: "redis", Bin: "redis-server", LogFile: filepath.Join(logs, name+".log"),
			ReadyAddr: c.addr(off), Args: []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(c.opt.Base + off),
				"--dir", dir, "--appendonly", "no", "--save", "", "--daemonize", "no", "--protected-mode", "no",
				"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "3000",
				"--cluster-port", strconv.Itoa(c.opt.Base + offRedisBuses[i]),
				// A master away leaves the other masters' slots served:
				// the items on them never stop.
				"--cluster-require-full-coverage", "no"}}
		if i == 0 {
			c.Redis = p
		}
		c.RedisNodes = append(c.RedisNodes, p)
		c.RedisAddrs = append(c.RedisAddrs, p.ReadyAddr)
	}
	c.RedisAddr = c.RedisAddrs[0]
	return []string{"WR_REDIS_MODE=cluster", "WR_REDIS_ADDRS=" + strings.Join(c.RedisAddrs, ",")}, nil
}

// startRedisCluster starts the masters after the first (started with
// Kafka), joins them with `redis-cli --cluster create` (the slots spread
// evenly) and waits until every node serves every slot.
func (c *Cluster) startRedisCluster(ctx context.Context) error {
	for _, p := range c.RedisNodes {
		if err := os.MkdirAll(redisDir(p), 0o755); err != nil {
			return err
		}
		if p != c.Redis {
			if err := c.startReady(ctx, p); err != nil {
				return err
			}
		}
	}
	args := append(append([]string{"--cluster", "create"}, c.RedisAddrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli --cluster create %s: %w\n%s", strings.Join(c.RedisAddrs, " "), err, out)
	}
	return c.redisClusterOK(ctx)
}

// redisDir is the data directory of a Redis process (its --dir).
func redisDir(p *Proc) string {
	for i, a := range p.Args {
		if a == "--dir" && i+1 < len(p.Args) {
			return p.Args[i+1]
		}
	}
	return ""
}

// redisClusterOK waits until every master serves every slot and knows the
// others.
func (c *Cluster) redisClusterOK(ctx context.Context) error {
	addrs := make([]string, len(c.RedisNodes))
	for i, p := range c.RedisNodes {
		addrs[i] = p.ReadyAddr
	}
	return redisclient.WaitClusterOK(ctx, addrs)
}

// RestartEmpty kills master p of the Redis Cluster (-9) and starts it
// again holding nothing: the same node (its nodes.conf is kept) with the
// same slots, as a master restarted without persistence. It returns once
// every master serves every slot again.
func (c *Cluster) RestartEmpty(ctx context.Context, p *Proc, down time.Duration) error {
	if !c.opt.RedisCluster {
		return errors.New("restart a master empty: Redis is not a Redis Cluster")
	}
	if err := p.Kill(); err != nil {
		return err
	}
	dir := redisDir(p)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("restart %s empty: %w", p.Name, err)
	}
	for _, e := range ents {
		if e.Name() != "nodes.conf" {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("restart %s empty: %w", p.Name, err)
			}
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := c.startReady(ctx, p); err != nil {
		return err
	}
	return c.redisClusterOK(ctx)
}

// MasterOf is the master of the Redis Cluster serving key's slot.
func (c *Cluster) MasterOf(ctx context.Context, key string) (*Proc, error) {
	cl := redis.NewClient(&redis.Options{Addr: c.RedisAddr, DialTimeout: 500 * time.Millisecond})
	defer cl.Close()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("the slot of %s: %w", key, err)
	}
	slots, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("the cluster's slots: %w", err)
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			if p := c.ProcOf(s.Nodes[0].Addr); p != nil {
				return p, nil
			}
			return nil, fmt.Errorf("slot %d of %s is served by %s, not a master of this cluster", slot, key, s.Nodes[0].Addr)
		}
	}
	return nil, fmt.Errorf("no master serves slot %d of %s", slot, key)
}
