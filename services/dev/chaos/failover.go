package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/services/dev/cluster"
)

// failover is a Sentinel failover under load in which the promoted replica
// missed writes, as asynchronous replication allows: the replica is frozen
// (SIGSTOP) and the primary drops its connection (CLIENT KILL TYPE
// replica), so what the load writes for the next second reaches the primary
// alone, acknowledged to its writers; then the primary is killed (-9) and
// the replica thawed. The Sentinels promote it without that second of
// writes. It returns when they name it primary; the old primary is then
// restarted from its AOF and the Sentinels make it a replica of the new one
// (it drops the writes the new primary never had).
func failover(ctx context.Context, c *cluster.Cluster, e env) (time.Time, error) {
	if c.Replica == nil {
		return time.Time{}, errors.New("redis-failover needs Redis behind Sentinel (WR_CHAOS_SENTINEL=true)")
	}
	addr, err := c.Primary(ctx)
	if err != nil {
		return time.Time{}, err
	}
	primary, replica := c.Redis, c.Replica
	if addr == c.Replica.ReadyAddr {
		primary, replica = c.Replica, c.Redis
	}
	pc := redis.NewClient(&redis.Options{Addr: primary.ReadyAddr})
	defer pc.Close()
	rc := redis.NewClient(&redis.Options{Addr: replica.ReadyAddr})
	defer rc.Close()
	// After an earlier failover the old primary, restarted, must have
	// synced as the replica first.
	for deadline := time.Now().Add(20 * time.Second); ; {
		if info, err := pc.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "state=online") {
			break
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("redis-failover: %s has no replica in sync after 20 s", primary.Name)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return time.Time{}, ctx.Err()
		}
	}

	if err := replica.Pause(); err != nil {
		return time.Time{}, err
	}
	if err := pc.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		replica.Resume()
		return time.Time{}, fmt.Errorf("drop the replica's connection: %w", err)
	}
	sleepCtx(ctx, time.Second)
	wrote, werr := infoInt(ctx, pc, "replication", "master_repl_offset")
	if err := primary.Kill(); err != nil {
		replica.Resume()
		return time.Time{}, err
	}
	if err := replica.Resume(); err != nil {
		return time.Time{}, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if a, err := c.Primary(ctx); err == nil && a == replica.ReadyAddr {
			break
		}
		if time.Now().After(deadline) {
			return time.Time{}, errors.New("redis-failover: the Sentinels promoted no replica within 30 s")
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return time.Time{}, ctx.Err()
		}
	}
	promoted := time.Now()
	// A promoted replica starts a new replication history from the offset
	// it had received, plus one.
	if got, err := infoInt(ctx, rc, "replication", "second_repl_offset"); err == nil && werr == nil && got > 0 {
		fmt.Fprintf(e.out, "chaos: redis-failover: %s promoted having missed %d bytes of %s's replication stream (%d written, %d received)\n",
			replica.Name, wrote-(got-1), primary.Name, wrote, got-1)
	}
	if err := c.Restart(ctx, primary); err != nil {
		return promoted, fmt.Errorf("restart the old primary: %w", err)
	}
	return promoted, nil
}
