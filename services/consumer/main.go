// Command waitroom-consumer applies registrations and item updates from Kafka
// to the lines in Redis.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/waitroom/waitroom/pkg/config"
	"github.com/waitroom/waitroom/pkg/logging"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"go.uber.org/zap"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "waitroom-consumer:", err)
		os.Exit(1)
	}
}

func run() error {
	config.TuneGC()
	cfg, err := config.Load[ingest.Config]()
	if err != nil {
		return err
	}
	log, err := logging.New(cfg.Log.Level, cfg.Log.Format, "consumer")
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log.Info("starting", config.Field(cfg))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := ingest.Run(ctx, cfg, nil, log, nil); err != nil {
		log.Error("stopped", zap.Error(err))
		return err
	}
	log.Info("stopped")
	return nil
}
