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
	"time"

	"github.com/waitroom/waitroom/pkg/config"
	"github.com/waitroom/waitroom/pkg/service"
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
	Log       config.Log
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
	dir, keep := cfg.Dir, cfg.Dir != ""
	if dir == "" {
		d, err := os.MkdirTemp("", "waitroom-chaos-")
		if err != nil {
			return err
		}
		dir = d
	}
	rows, err := chaos.Run(ctx, chaos.Options{
		Cluster: cluster.Options{Bin: cfg.Bin, Dir: dir, Base: cfg.Base, Env: []string{"WR_LOG_LEVEL=info"}},
		Faults:  cfg.Faults, Rate: cfg.Rate, Settle: cfg.Settle, MaxPeople: cfg.MaxPeople, Deadline: cfg.Deadline, AimSlack: cfg.AimSlack, Log: log,
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
