// Command waitroom-chaos runs the chaos suite (`make chaos`, `make
// chaos-ci`): a multi-process cluster under steady load, one fault after the
// other, the invariants checked after each and at the end. It prints a table
// and exits 1 when any invariant or recovery aim failed.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/services/dev/chaos"
	"github.com/waitroom/waitroom/services/dev/cluster"
	"go.uber.org/zap"
)

// Config of a chaos run.
type Config struct {
	Bin       string        `env:"WR_CLUSTER_BIN" envDefault:"bin"`
	Dir       string        `env:"WR_CHAOS_DIR"` // empty: a new temporary directory, removed after a passing run
	Base      int           `env:"WR_CHAOS_BASE_PORT" envDefault:"19200"`
	Faults    []string      `env:"WR_CHAOS_FAULTS" envSeparator:","` // empty: every fault
	Rate      float64       `env:"WR_CHAOS_RATE" envDefault:"20"`
	Settle    time.Duration `env:"WR_CHAOS_SETTLE" envDefault:"15s"`
	MaxPeople int           `env:"WR_CHAOS_MAX_PEOPLE" envDefault:"20000"`
	Deadline  time.Duration `env:"WR_CHAOS_DEADLINE" envDefault:"20m"`
	AimSlack  float64       `env:"WR_CHAOS_AIM_SLACK" envDefault:"1"`
	// Nemesis runs after the faults: overlapping link faults from the
	// schedule of Seed (empty: a new seed, printed) on an isolated cluster.
	Nemesis time.Duration `env:"WR_CHAOS_NEMESIS" envDefault:"2m"`
	Seed    string        `env:"WR_CHAOS_SEED"`
	// Skew moves each api's, scheduler's and notifier's clock by up to
	// ±Skew, drawn from the seed (0: no skew).
	Skew    time.Duration `env:"WR_CHAOS_SKEW" envDefault:"2s"`
	Isolate bool          `env:"WR_CHAOS_ISOLATE" envDefault:"true"` // each service in its own network namespace (needs root)
	// Sentinel runs Redis as a primary, a replica and three Sentinels, and
	// adds the redis-failover fault.
	Sentinel bool `env:"WR_CHAOS_SENTINEL" envDefault:"false"`
	// RedisCluster runs Redis as a 3-master Redis Cluster and adds the
	// faults of a master restarted empty (redis-node-empty,
	// redis-epoch-node-empty).
	RedisCluster bool `env:"WR_CHAOS_REDIS_CLUSTER" envDefault:"false"`
	// Pprof serves net/http/pprof on every service (WR_PPROF_ADDR: its HTTP
	// port + 100), to profile a soak's heap while it runs.
	Pprof          bool          `env:"WR_CHAOS_PPROF" envDefault:"false"`
	ProduceTimeout time.Duration `env:"WR_PRODUCE_TIMEOUT" envDefault:"5s"` // the apis' own setting, inherited
	// StrictPositions fails the run when a client was told a position larger
	// than before (always reported; false only reports it). The pollers send
	// back the status cursor, so no api replica tells more than the last answer.
	StrictPositions bool `env:"WR_CHAOS_STRICT_POSITIONS" envDefault:"true"`
	// Meter reads every process's RSS and goroutines, and with Pprof each
	// service's live heap, this often (0: never);
	// the run fails when one grew past Growth times its reading a third of
	// the way in (make soak-chaos).
	Meter  time.Duration `env:"WR_CHAOS_METER" envDefault:"0"`
	Growth float64       `env:"WR_CHAOS_GROWTH" envDefault:"1.1"`
	// Calm holds the nemesis off this long before the meter's readings a
	// third of the way in and at the end, and growth judges only readings
	// taken a minute or more after the last fault (make soak-chaos: 3m);
	// 0: every reading judged.
	Calm time.Duration `env:"WR_CHAOS_CALM" envDefault:"0"`
	// Plot draws the curves of a kept run's meter.csv into an SVG beside
	// it (meter.svg) and runs nothing else.
	Plot string `env:"WR_CHAOS_PLOT"`
	// Sabotage commits what a broken build would mid-nemesis (readmit: a
	// second admission of someone admitted): the run must fail. It tests
	// the suite itself.
	Sabotage string `env:"WR_CHAOS_SABOTAGE"`
	Log      config.Log
}

var errFailed = errors.New("an invariant or a recovery aim failed (see the table)")

func main() {
	service.Main("chaos", func(c Config) config.Log {
		if os.Getenv("WR_LOG_LEVEL") == "" {
			c.Log.Level = "warn"
		}
		c.Log.Format = "console"
		return c.Log
	}, run)
}

func run(ctx context.Context, cfg Config, log *zap.Logger) error {
	if cfg.Plot != "" {
		svg := strings.TrimSuffix(cfg.Plot, filepath.Ext(cfg.Plot)) + ".svg"
		if err := chaos.PlotMeter(cfg.Plot, svg, "RSS and goroutines of every process ("+filepath.Base(filepath.Dir(cfg.Plot))+")"); err != nil {
			return err
		}
		fmt.Println("chaos: plotted in", svg)
		return nil
	}
	dir, keep := cfg.Dir, cfg.Dir != "" || cfg.Meter > 0 // a soak keeps its meter.csv
	if dir == "" {
		d, err := os.MkdirTemp("", "waitroom-chaos-")
		if err != nil {
			return err
		}
		dir = d
	}
	seed := time.Now().UnixNano() % 1_000_000_000
	if cfg.Seed != "" {
		s, err := strconv.ParseInt(cfg.Seed, 10, 64)
		if err != nil {
			return fmt.Errorf("WR_CHAOS_SEED %q: %w", cfg.Seed, err)
		}
		seed = s
	}
	if cfg.Nemesis > 0 {
		fmt.Printf("chaos: seed %d (WR_CHAOS_SEED=%d replays this nemesis)\n", seed, seed)
	}
	rows, err := chaos.Run(ctx, chaos.Options{
		Cluster: cluster.Options{Bin: cfg.Bin, Dir: dir, Base: cfg.Base, Env: []string{"WR_LOG_LEVEL=info"}, Isolate: cfg.Isolate, Sentinel: cfg.Sentinel,
			RedisCluster: cfg.RedisCluster, Pprof: cfg.Pprof},
		Faults: cfg.Faults, Rate: cfg.Rate, Settle: cfg.Settle, MaxPeople: cfg.MaxPeople, Deadline: cfg.Deadline, AimSlack: cfg.AimSlack,
		Nemesis: cfg.Nemesis, Seed: seed, Skew: cfg.Skew, ProduceTimeout: cfg.ProduceTimeout, StrictPositions: cfg.StrictPositions,
		Meter: cfg.Meter, Growth: cfg.Growth, Calm: cfg.Calm, Sabotage: cfg.Sabotage, Log: log,
	}, os.Stdout)
	if err != nil {
		fmt.Printf("chaos: the processes' logs are in %s/logs\n", dir)
		return err
	}
	for _, r := range rows {
		if !r.OK() {
			fmt.Printf("chaos: FAILED; the processes' logs are in %s/logs\n", dir)
			return errFailed
		}
	}
	fmt.Println("chaos: every invariant held")
	if !keep {
		os.RemoveAll(dir)
	}
	return nil
}
