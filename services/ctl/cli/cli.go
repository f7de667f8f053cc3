// Package cli is waitroomctl, the operator's command line: it creates and
// checks the Kafka topics, lists, shows and replays dead letters, overrides an
// item, shows the lines' counters and benchmarks a running stack. Main runs it
// in-process, so tests drive it with args and read what it printed.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"

	"github.com/spf13/cobra"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"go.uber.org/zap"
)

// Exit codes of waitroomctl.
const (
	ExitOK      = 0 // the command did what was asked and found things healthy
	ExitFailure = 1 // the command ran and failed, or found the system unhealthy
	ExitUsage   = 2 // bad flags, arguments or environment: nothing was run
)

// Env is what waitroomctl reads from the environment: the defaults of its flags.
type Env struct {
	Kafka      config.Kafka
	Redis      config.Redis
	Partitions int32  `env:"WR_REGISTRATION_PARTITIONS" envDefault:"12"`
	APIURL     string `env:"WR_API_URL" envDefault:"http://127.0.0.1:8080"`
	AdminURL   string `env:"WR_ADMIN_URL" envDefault:"http://127.0.0.1:8082"`
	AdminToken string `env:"WR_ADMIN_TOKEN" secret:"true"`
	// FlagKey signs the kits' flag (waitroomctl flag): a base64 Ed25519 seed.
	FlagKey   string `env:"WR_FLAG_KEY" secret:"true"`
	LogLevel  string `env:"WR_LOG_LEVEL" envDefault:"warn"`
	LogFormat string `env:"WR_LOG_FORMAT" envDefault:"console"`
	// SchedulerTxnID is the schedulers' transactional id prefix: a rebuild
	// fences their ids before it reads waitroom.admissions.
	SchedulerTxnID string `env:"WR_SCHEDULER_TRANSACTIONAL_ID" envDefault:"waitroom-scheduler"`
}

// DefaultEnv is the Env of an empty environment (the defaults of its tags).
func DefaultEnv() Env {
	e, err := config.Defaults[Env]()
	if err != nil {
		panic(err) // unreachable: the tags' defaults parse (TestDefaultEnv)
	}
	return e
}

// Validate checks what the environment cannot; waitroomctl stops with exit
// code 2 (usage) on an error.
func (e Env) Validate() error {
	switch {
	case e.Partitions <= 0:
		return fmt.Errorf("WR_REGISTRATION_PARTITIONS must be positive, not %d", e.Partitions)
	case e.LogFormat != "json" && e.LogFormat != "console":
		return fmt.Errorf("WR_LOG_FORMAT must be json or console, not %q", e.LogFormat)
	}
	for name, u := range map[string]string{"WR_API_URL": e.APIURL, "WR_ADMIN_URL": e.AdminURL} {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return fmt.Errorf("%s must be an http(s) URL, not %q", name, u)
		}
	}
	return nil
}

// Main runs waitroomctl with args (without the program name), printing results
// to stdout and errors to stderr, and returns the exit code. ctx cancels
// whatever is running (Ctrl-C).
func Main(ctx context.Context, env Env, log *zap.Logger, args []string, stdout, stderr io.Writer) int {
	if log == nil {
		log = zap.NewNop()
	}
	a := &app{env: env, log: log, out: stdout}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "waitroomctl:", err)
	var ue usageError
	if errors.As(err, &ue) || !a.started {
		if cmd != nil {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		return ExitUsage
	}
	return ExitFailure
}

// app is one run of the command line: its environment, where it prints, and
// whether a command got as far as running (an error before that is a usage error).
type app struct {
	env     Env
	log     *zap.Logger
	out     io.Writer
	output  string
	started bool
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "waitroomctl",
		Short: "Operate a waitroom deployment: topics, dead letters, item overrides, queue stats, benchmarks",
		Long: `waitroomctl operates a waitroom deployment.

It talks to Kafka (--brokers, env WR_KAFKA_BROKERS) for topics, dead letters
and item events, and to a scheduler's admin API (--admin-url, env WR_ADMIN_URL;
--admin-token, env WR_ADMIN_TOKEN) for queue stats. 'line' and 'rebuild'
read Redis (--redis, env WR_REDIS_ADDR or WR_REDIS_ADDRS). Kafka's TLS and SASL
settings (WR_KAFKA_TLS*, WR_KAFKA_SASL_*) and Redis's mode, TLS and user
(WR_REDIS_MODE, WR_REDIS_TLS*, WR_REDIS_USERNAME...) come from the
environment, as for every service.

Exit codes: 0 done and healthy, 1 failed or unhealthy, 2 usage error (nothing was run).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(a.topicsCmd(), a.dlqCmd(), a.itemsCmd(), a.statsCmd(), a.benchCmd(), a.rebuildCmd(), a.lineCmd(), a.blocksCmd(), a.bypassCmd(), a.drawCmd(), a.flagCmd())
	return root
}

// group returns a command that only holds subcommands: alone it prints its
// help, with an unknown subcommand it is a usage error.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	g.AddCommand(subs...)
	return g
}

// leaf wraps a command's work: the output format is checked first, and from
// then on an error is a failure rather than a usage error (unless it is one).
func (a *app) leaf(run func(ctx context.Context) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if a.output != "table" && a.output != "json" {
			return usagef("--output %q: want table or json", a.output)
		}
		a.started = true
		return run(cmd.Context())
	}
}

// wantJSON reports whether the user asked for -o json.
func (a *app) wantJSON() bool { return a.output == "json" }

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// usageError marks an error as the caller's: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }
