// Package service runs a waitroom process the same way every time: config from
// the environment, the zap logger, SIGINT/SIGTERM as the end of the context,
// the configuration logged with secrets masked, and the exit code.
package service

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/waitroom/waitroom/pkg/foundation/config"
	"go.uber.org/zap"
)

// Main loads a C from the environment, validates it (a C with a Validate
// method: an invalid config stops the process before anything starts, with
// one line naming the variable), builds the logger from logCfg(c), and calls
// run until it returns or a signal asks the process to stop; a failure exits
// with status 1. Only Main exits.
func Main[C any](name string, logCfg func(C) config.Log, run func(ctx context.Context, cfg C, log *zap.Logger) error) {
	if err := runMain(name, logCfg, run); err != nil {
		fmt.Fprintf(os.Stderr, "waitroom-%s: %v\n", name, err)
		os.Exit(1)
	}
}

// startFields renders cfg for the start-up log with the log settings the
// logger really uses: logCfg may choose its own (the dev stack logs in console
// format unless WR_LOG_FORMAT says otherwise).
func startFields(cfg any, lc config.Log) zap.Field {
	v := config.Values(cfg)
	v["WR_LOG_LEVEL"], v["WR_LOG_FORMAT"] = lc.Level, lc.Format
	return zap.Any("config", v)
}

func runMain[C any](name string, logCfg func(C) config.Log, run func(context.Context, C, *zap.Logger) error) error {
	config.TuneGC()
	cfg, err := config.Load[C]()
	if err != nil {
		return err
	}
	if err := config.Validate(cfg); err != nil {
		return err
	}
	lc := logCfg(cfg)
	log, err := NewLogger(lc.Level, lc.Format, name)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log.Info("starting", startFields(cfg, lc))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("stopped", zap.Error(err))
		return err
	}
	log.Info("stopped")
	return nil
}
