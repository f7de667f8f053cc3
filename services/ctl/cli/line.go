package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/redisclient"
	"github.com/waitroom/waitroom/pkg/redisview/linesnap"
)

// ErrDifferent is returned by line diff when the snapshots differ (exit 1).
var ErrDifferent = errors.New("the snapshots differ")

// redisOpts are the flags of every command that reads Redis.
type redisOpts struct {
	addr    string
	timeout time.Duration
}

func (a *app) redisFlags(cmd *cobra.Command, o *redisOpts) {
	cmd.Flags().StringVar(&o.addr, "redis", a.redisDefault(), redisFlagHelp)
	cmd.Flags().DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up when this is not done within this time")
}

// redisFlagHelp is the help of every --redis flag.
const redisFlagHelp = "Redis address (env WR_REDIS_ADDR, or WR_REDIS_ADDRS: comma-separated seeds or Sentinels; WR_REDIS_MODE, TLS, user and password apply)"

// redisDefault is the --redis default: the configured endpoints.
func (a *app) redisDefault() string { return strings.Join(a.env.Redis.Endpoints(), ",") }

// redisAt returns a client of the configured Redis at addr (the --redis
// flag: one address in single mode, comma-separated ones in the others).
func (a *app) redisAt(addr string, pool int) (redis.UniversalClient, error) {
	r := a.env.Redis
	r.PoolSize = pool
	if r.Mode == "" || strings.EqualFold(r.Mode, config.RedisSingle) {
		r.Addr, r.Addrs = addr, nil
	} else {
		r.Addrs = strings.Split(addr, ",")
	}
	rdb, err := redisclient.New(r)
	if err != nil {
		return nil, usagef("--redis %s: %v", addr, err)
	}
	return rdb, nil
}

func (a *app) redisClient(o *redisOpts) (redis.UniversalClient, error) {
	if o.addr == "" {
		return nil, usagef("--redis: an address is needed")
	}
	if o.timeout <= 0 {
		return nil, usagef("--timeout %s: must be positive", o.timeout)
	}
	return a.redisAt(o.addr, 2)
}

func (a *app) lineCmd() *cobra.Command {
	var ro redisOpts
	var file string
	snap := &cobra.Command{
		Use:   "snapshot <itemId>",
		Short: "Write a canonical dump of an item's line: every token with its user, state, seq, position and expiry",
		Long: `Write a canonical dump of an item's line in Redis: the seq and head counters, the
applied offsets, and every token (sorted) with its place key, state (WAITING,
ADMITTED, LEFT, ABANDONED, COMPLETED, GONE), seq and position while waiting,
expiry while admitted.
The same line gives the same bytes (but for takenAtMs), so a snapshot taken
before a rebuild and one taken after it can be compared with 'line diff'.
Take it while the item is quiet (paused, consumer stopped) for an exact picture.`,
		Args: exactArgs(1, "an itemId"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.leaf(func(ctx context.Context) error { return a.runLineSnapshot(ctx, &ro, args[0], file) })(cmd, args)
		},
	}
	a.redisFlags(snap, &ro)
	snap.Flags().StringVarP(&file, "file", "f", "", "write to this file instead of standard output")
	diff := &cobra.Command{
		Use:   "diff <snapshotA> <snapshotB>",
		Short: "Compare two line snapshots; exit 0 when the same, 1 with the differences listed, 2 on error",
		Args:  exactArgs(2, "two snapshot files"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.leaf(func(context.Context) error { return a.runLineDiff(args[0], args[1]) })(cmd, args)
		},
	}
	return group("line", "Snapshot an item's line and compare snapshots (prove a rebuild exact)", snap, diff)
}

func (a *app) runLineSnapshot(ctx context.Context, o *redisOpts, item, file string) error {
	rdb, err := a.redisClient(o)
	if err != nil {
		return err
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	s, err := linesnap.Take(ctx, rdb, item, time.Time{})
	if err != nil {
		return fmt.Errorf("snapshot of %s on %s: %w", item, o.addr, err)
	}
	if file == "" {
		return s.Write(a.out)
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("snapshot of %s: %w", item, err)
	}
	if err := s.Write(f); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("snapshot of %s: %w", item, err)
	}
	_, err = fmt.Fprintf(a.out, "%s: %d tokens of %s (seq %d, head %d)\n", file, len(s.Entries), item, s.Seq, s.Head)
	return err
}

func (a *app) runLineDiff(fa, fb string) error {
	sa, err := readSnapshot(fa)
	if err != nil {
		return err
	}
	sb, err := readSnapshot(fb)
	if err != nil {
		return err
	}
	d := linesnap.Diff(sa, sb)
	if a.wantJSON() {
		if d == nil {
			d = []string{}
		}
		if err := a.printJSON(map[string]any{"same": len(d) == 0, "differences": d}); err != nil {
			return err
		}
	} else {
		for _, l := range d {
			fmt.Fprintln(a.out, l)
		}
		if len(d) == 0 {
			fmt.Fprintf(a.out, "same: %d tokens of %s\n", len(sa.Entries), sa.Item)
		}
	}
	if len(d) > 0 {
		return fmt.Errorf("%w: %d differences (A %s, B %s)", ErrDifferent, len(d), fa, fb)
	}
	return nil
}

// readSnapshot reads a snapshot file; a file that cannot be read is an
// error of the command (exit 2), not a difference.
func readSnapshot(file string) (*linesnap.Snapshot, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, usageError{err}
	}
	defer f.Close()
	s, err := linesnap.Read(f)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %w", file, err)}
	}
	return s, nil
}
