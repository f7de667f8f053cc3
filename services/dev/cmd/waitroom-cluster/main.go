// Command waitroom-cluster runs waitroom in its production shape on one
// machine (`make cluster`): Kafka, Redis, 2 api, 2 consumer, 3 scheduler and
// 2 notifier replicas, each its own process from its own binary, behind a
// Caddy front door. Ctrl-C stops them all.
package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/services/dev/cluster"
	"go.uber.org/zap"
)

// Config of the cluster command.
type Config struct {
	Bin  string `env:"WR_CLUSTER_BIN" envDefault:"bin"`
	Dir  string `env:"WR_CLUSTER_DIR" envDefault:".data/cluster"`
	Base int    `env:"WR_CLUSTER_BASE_PORT" envDefault:"19000"`
	Log  config.Log
}

func main() {
	service.Main("cluster", func(c Config) config.Log {
		c.Log.Format = "console"
		return c.Log
	}, run)
}

func run(ctx context.Context, cfg Config, log *zap.Logger) error {
	c, err := cluster.Start(ctx, cluster.Options{Bin: cfg.Bin, Dir: cfg.Dir, Base: cfg.Base, Log: log})
	if err != nil {
		if ctx.Err() != nil {
			return nil // Ctrl-C while starting: what started has stopped
		}
		return err
	}
	fmt.Print(banner(c))
	exited := make(chan *cluster.Proc, 16)
	for _, p := range c.All() {
		go func() {
			select {
			case <-p.Exited():
				exited <- p
			case <-ctx.Done():
			}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			log.Info("stopping every process")
			return c.Stop()
		case p := <-exited:
			log.Error("a process exited; the others go on (its log says why)", zap.String("process", p.Name), zap.String("log", p.LogFile))
		}
	}
}

func banner(c *cluster.Cluster) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nwaitroom cluster is running: every service its own process (data and logs in %s)\n\n", c.Dir())
	fmt.Fprintf(&b, "  front door   %s   (the page: %s/items/concert-2026/wait)\n", c.URL, c.URL)
	fmt.Fprintf(&b, "  kafka        %s   (pid %d)\n", strings.Join(c.Brokers, ","), c.Kafka.PID())
	fmt.Fprintf(&b, "  redis        %s   (pid %d, appendonly)\n", c.RedisAddr, c.Redis.PID())
	for _, p := range c.All()[2 : len(c.All())-1] {
		fmt.Fprintf(&b, "  %-12s %s   (pid %d)\n", p.Name, "http://"+p.Addr, p.PID())
	}
	fmt.Fprintf(&b, "\n  admin token  %s   (curl -H 'Authorization: Bearer …' <scheduler>/internal/admin/v1/items)\n", c.AdminToken)
	b.WriteString("\nCtrl-C stops every process.\n")
	return b.String()
}
