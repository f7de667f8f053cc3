// Command waitroom-kafka runs Kafka as a process of its own for `make cluster`
// and the chaos suite: kfake (franz-go's in-memory Kafka, real wire protocol)
// with several brokers on fixed ports and a data directory, so it can be
// killed with -9 and started again from what it wrote, like a broker.
package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"go.uber.org/zap"
)

// Config of the Kafka process.
type Config struct {
	Ports   []int  `env:"WR_KAFKA_PORTS" envDefault:"9092,9093,9094" envSeparator:","`
	DataDir string `env:"WR_KAFKA_DATA_DIR" envDefault:".data/kafka"`
	// Sync makes every produce durable on disk before it is acknowledged
	// (fsync per batch); off, writes reach the OS at once (they survive a
	// kill -9 of this process, not a power cut), as real Kafka's default.
	Sync bool `env:"WR_KAFKA_SYNC_WRITES" envDefault:"false"`
	Log  config.Log
}

func main() {
	service.Main("kafka", func(c Config) config.Log { return c.Log }, run)
}

func run(ctx context.Context, cfg Config, log *zap.Logger) error {
	if len(cfg.Ports) == 0 {
		return fmt.Errorf("WR_KAFKA_PORTS is empty")
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("data dir %q: %w", cfg.DataDir, err)
	}
	opts := []kfake.Opt{kfake.NumBrokers(len(cfg.Ports)), kfake.Ports(cfg.Ports...), kfake.DataDir(dir)}
	if cfg.Sync {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("start kafka on ports %v: %w", cfg.Ports, err)
	}
	log.Info("kafka up", zap.Strings("brokers", c.ListenAddrs()), zap.String("data", dir))
	<-ctx.Done()
	log.Info("kafka stopping: flushing to the data dir")
	c.Close()
	return nil
}
