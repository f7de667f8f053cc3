// Command waitroomctl is the operator's command line: create and check the
// Kafka topics, list, show and replay dead letters, override an item, watch
// the lines' counters, and benchmark a running stack. Exit codes: 0 ok, 1
// failure or unhealthy, 2 usage error.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/services/ctl/cli"
)

func main() {
	os.Exit(run())
}

func run() int {
	env, err := config.Load[cli.Env]()
	if err == nil {
		err = env.Validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "waitroomctl:", err)
		return cli.ExitUsage
	}
	log, err := service.NewLogger(env.LogLevel, env.LogFormat, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "waitroomctl:", err)
		return cli.ExitUsage
	}
	defer func() { _ = log.Sync() }()
	log.Debug("starting", config.Field(env))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cli.Main(ctx, env, log, os.Args[1:], os.Stdout, os.Stderr)
}
