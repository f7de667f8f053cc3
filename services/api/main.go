// Command waitroom-api serves the registration API.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/waitroom/waitroom/pkg/config"
	"github.com/waitroom/waitroom/pkg/logging"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"go.uber.org/zap"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "waitroom-api:", err)
		os.Exit(1)
	}
}

func run() error {
	config.TuneGC()
	cfg, err := config.Load[httpapi.Config]()
	if err != nil {
		return err
	}
	log, err := logging.New(cfg.Log.Level, cfg.Log.Format, "api")
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log.Info("starting", config.Field(cfg))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := httpapi.Run(ctx, cfg, nil, log, nil); err != nil {
		log.Error("stopped", zap.Error(err))
		return err
	}
	log.Info("stopped")
	return nil
}
