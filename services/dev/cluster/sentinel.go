package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// buildSentinel lays out Sentinel mode's processes: the replica (its data
// in redis-replica/) and three Sentinels, each with a config file of its own
// (a Sentinel rewrites it).
func (c *Cluster) buildSentinel(abs, logs string) error {
	c.Replica = &Proc{Name: "redis-replica", Kind: "redis", Bin: "redis-server", LogFile: filepath.Join(logs, "redis-replica.log"),
		ReadyAddr: c.addr(offReplica), Args: []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(c.opt.Base + offReplica),
			"--dir", filepath.Join(abs, "redis-replica"), "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
			"--daemonize", "no", "--protected-mode", "no",
			"--replicaof", "127.0.0.1", strconv.Itoa(c.opt.Base + offRedis)}}
	for i := range 3 {
		name := fmt.Sprintf("sentinel-%d", i+1)
		conf := filepath.Join(abs, name+".conf")
		body := fmt.Sprintf("port %[3]d\nbind 127.0.0.1\nprotected-mode no\ndir %[4]s\n"+
			"sentinel monitor %[1]s 127.0.0.1 %[2]d 2\nsentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 3000\nsentinel parallel-syncs %[1]s 1\n",
			SentinelMaster, c.opt.Base+offRedis, c.opt.Base+offSentinel+i, abs)
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", conf, err)
		}
		c.Sentinels = append(c.Sentinels, &Proc{Name: name, Kind: "sentinel", Bin: "redis-server", LogFile: filepath.Join(logs, name+".log"),
			ReadyAddr: c.addr(offSentinel + i), Args: []string{conf, "--sentinel"}})
	}
	return nil
}

// startSentinel starts the replica and the Sentinels, and waits until the replica is in sync and every Sentinel knows it and
// the other two, so that a kill of the primary is followed by a failover.
func (c *Cluster) startSentinel(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(c.opt.Dir, "redis-replica"), 0o755); err != nil {
		return err
	}
	for _, p := range append([]*Proc{c.Replica}, c.Sentinels...) {
		if err := c.startReady(ctx, p); err != nil {
			return err
		}
	}
	pc := redis.NewClient(&redis.Options{Addr: c.RedisAddr})
	defer pc.Close()
	for {
		info, _ := pc.Info(ctx, "replication").Result()
		known := strings.Contains(info, "state=online")
		for _, s := range c.Sentinels {
			sc := redis.NewSentinelClient(&redis.Options{Addr: s.ReadyAddr})
			reps, _ := sc.Replicas(ctx, SentinelMaster).Result()
			others, _ := sc.Sentinels(ctx, SentinelMaster).Result()
			sc.Close()
			known = known && len(reps) == 1 && len(others) == len(c.Sentinels)-1
		}
		if known {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sentinel mode: the replica not in sync, or the Sentinels not knowing it and each other: %s: %w", info, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Primary asks the Sentinels which server is the primary now (in single
// mode, the one server).
func (c *Cluster) Primary(ctx context.Context) (string, error) {
	if len(c.Sentinels) == 0 {
		return c.RedisAddr, nil
	}
	var errs []error
	for _, s := range c.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.ReadyAddr, DialTimeout: 500 * time.Millisecond})
		a, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		sc.Close()
		if err == nil && len(a) == 2 {
			return a[0] + ":" + a[1], nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("ask the Sentinels for the primary: %w", errors.Join(errs...))
}

// RedisClient is a client of the primary: in Sentinel mode one that follows
// the Sentinels' primary through a failover; in Redis Cluster mode a client
// of the cluster.
func (c *Cluster) RedisClient(o redis.Options) redis.UniversalClient {
	if len(c.RedisNodes) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.RedisAddrs, MaxRetries: o.MaxRetries,
			DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout})
	}
	if len(c.Sentinels) == 0 {
		o.Addr = c.RedisAddr
		return redis.NewClient(&o)
	}
	var sents []string
	for _, s := range c.Sentinels {
		sents = append(sents, s.ReadyAddr)
	}
	return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: sents,
		MaxRetries: o.MaxRetries, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout})
}

// ProcOf is the process listening on addr (the primary, the replica), or nil.
func (c *Cluster) ProcOf(addr string) *Proc {
	for _, p := range c.All() {
		if p != nil && p.ReadyAddr == addr {
			return p
		}
	}
	return nil
}
