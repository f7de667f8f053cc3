// Command waitroom-dev runs the whole waitroom stack on one machine with
// nothing but Go: an embedded 3-broker Kafka (kfake) and Redis (a real
// redis-server when installed, else embedded), the topics, every service, and
// a few demo items. Ctrl-C stops it; .data/ keeps what was queued.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	_ "net/http/pprof" // profiles of the whole stack on WR_DEV_PPROF_ADDR
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"github.com/waitroom/waitroom/pkg/kafka/topicadmin"
	"github.com/waitroom/waitroom/services/dev/localredis"
	"github.com/waitroom/waitroom/services/dev/stack"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Config of the dev stack.
type Config struct {
	DataDir    string   `env:"WR_DEV_DATA_DIR" envDefault:".data"`
	KafkaPorts []int    `env:"WR_DEV_KAFKA_PORTS" envDefault:"9092,9093,9094" envSeparator:","`
	RedisPort  int      `env:"WR_DEV_REDIS_PORT" envDefault:"6379"`
	Partitions int32    `env:"WR_REGISTRATION_PARTITIONS" envDefault:"12"`
	PprofAddr  string   `env:"WR_DEV_PPROF_ADDR" envDefault:"127.0.0.1:6060"` // empty: off
	Schedulers []string `env:"WR_DEV_SCHEDULER_ADDRS" envDefault:"127.0.0.1:8082,127.0.0.1:8083,127.0.0.1:8084" envSeparator:","`
	AdminToken string   `env:"WR_ADMIN_TOKEN" envDefault:"dev-admin-token" secret:"true"`
	FrontAddr  string   `env:"WR_DEV_FRONT_ADDR" envDefault:"127.0.0.1:8000"`
	// Consumer false leaves the consumer out of the stack, for one run as its
	// own process (bench/ceiling.sh reads its CPU per record that way).
	Consumer bool `env:"WR_DEV_CONSUMER" envDefault:"true"`
	Log      config.Log
}

func main() {
	service.Main("dev", func(c Config) config.Log {
		if os.Getenv("WR_LOG_FORMAT") == "" {
			c.Log.Format = "console" // a person is watching this one
		}
		return c.Log
	}, run)
}

// run runs the stack until ctx ends. Ctrl-C while it is still starting is a
// clean stop as well (exit 0), not a failure: what was started has stopped.
func run(ctx context.Context, cfg Config, log *zap.Logger) error {
	err := runStack(ctx, cfg, log)
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		log.Info("stopped while starting", zap.NamedError("cause", err))
		return nil
	}
	return err
}

func runStack(ctx context.Context, cfg Config, log *zap.Logger) error {
	if cfg.PprofAddr != "" {
		go func() {
			srv := &http.Server{Addr: cfg.PprofAddr, Handler: http.DefaultServeMux, ReadHeaderTimeout: 5 * time.Second}
			if err := srv.ListenAndServe(); err != nil {
				log.Warn("pprof listener", zap.Error(err))
			}
		}()
	}
	kafka, err := kfake.NewCluster(kfake.NumBrokers(len(cfg.KafkaPorts)), kfake.Ports(cfg.KafkaPorts...),
		kfake.DataDir(filepath.Join(cfg.DataDir, "kafka")))
	if err != nil {
		return fmt.Errorf("start embedded kafka on %v: %w", cfg.KafkaPorts, err)
	}
	defer kafka.Close()
	brokers := kafka.ListenAddrs()
	log.Info("kafka: embedded kfake cluster", zap.Strings("brokers", brokers), zap.String("data", filepath.Join(cfg.DataDir, "kafka")))

	rds, err := localredis.Start(ctx, filepath.Join(cfg.DataDir, "redis"), cfg.RedisPort)
	if err != nil {
		return err
	}
	defer rds.Stop()
	log.Info("redis: "+rds.Kind, zap.String("addr", rds.Addr))

	base, err := kclient.Opts(ctx, config.Kafka{Brokers: brokers}, "waitroom-dev", log)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(base...)
	if err != nil {
		return fmt.Errorf("kafka admin client: %w", err)
	}
	defer cl.Close()
	o := topics.DefaultOptions()
	o.RegistrationPartitions = cfg.Partitions
	st, err := topicadmin.Ensure(ctx, kadm.NewClient(cl), topics.Specs(o), -1)
	if err != nil {
		return err
	}
	for _, s := range st {
		log.Info("topic", zap.String("topic", s.Topic), zap.String("state", s.State), zap.Strings("problems", s.Problems))
	}
	if err := stack.PublishItems(ctx, cl, stack.DemoItems()...); err != nil {
		return err
	}

	// Every service reads its own settings from the environment (WR_API_ADDR,
	// WR_TOKEN_KEY, WR_SCHEDULER_TICK...), as it would deployed; this config
	// holds only what the dev stack itself adds.
	s, err := stack.Start(ctx, stack.Options{Env: true, Brokers: brokers, RedisAddr: rds.Addr, Log: log,
		Schedulers: len(cfg.Schedulers), SchedulerAddrs: cfg.Schedulers, AdminToken: cfg.AdminToken,
		FrontAddr: cfg.FrontAddr, NoConsumer: !cfg.Consumer})
	if err != nil {
		return err
	}
	printBanner(s, brokers, rds, cfg.AdminToken)
	select {
	case <-ctx.Done():
		log.Info("stopping")
	case err := <-s.Done():
		log.Error("a service stopped", zap.Error(err))
	}
	return s.Stop()
}

func printBanner(s *stack.Stack, brokers []string, rds *localredis.Server, adminToken string) {
	fmt.Printf(`
waitroom is running. Open the waiting room in a browser:
  %[9]s/items/concert-2026/wait

  front door %[9]s   (the page, the API and the event streams on one origin)
  demo shop  %[9]s/shop/{itemId}   (behind the page's "continue": waitroomkit's middleware; "buy" completes the admission)
  api        %[1]s   (health %[1]s/healthz, ready %[1]s/readyz, metrics %[1]s/metrics)
  consumer   %[2]s
  notifier   %[10]s   (Server-Sent Events: GET …/registrations/{token}/events)
  schedulers %[6]v (one leads; admin API on each)
  kafka      %[3]v (embedded)
  redis      %[4]s (%[5]s)

Try it:
  curl -s -XPOST %[1]s/api/v1/items/concert-2026/registrations -H 'content-type: application/json' -d '{"userId":"alice"}'
  TOKEN=$(curl -s -XPOST %[1]s/api/v1/items/concert-2026/registrations -d '{"userId":"bob"}' | sed 's/.*"token":"\([^"]*\)".*/\1/')
  curl -s %[1]s/api/v1/items/concert-2026/registrations/$TOKEN        # WAITING, then ADMITTED with an admissionToken
  curl -s -XDELETE %[1]s/api/v1/items/concert-2026/registrations/$TOKEN
  curl -s -XPOST %[1]s/api/v1/items/sold-out-demo/registrations     # 410 SOLD_OUT
  curl -s -XPOST %[1]s/api/v1/items/closed-demo/registrations       # 409 QUEUE_CLOSED
  curl -s %[1]s/.well-known/jwks.json                                # verify admission tokens offline

Operate it (admin token %[7]q): the console %[8]s/admin, or
  curl -s -H 'Authorization: Bearer %[7]s' %[8]s/internal/admin/v1/items
  curl -s -XPUT -H 'Authorization: Bearer %[7]s' %[8]s/internal/admin/v1/items/concert-2026/admission -d '{"ratePerSecond":20}'
  curl -s -XPUT -H 'Authorization: Bearer %[7]s' %[8]s/internal/admin/v1/items/concert-2026/admission -d '{"paused":true}'

Ctrl-C stops everything; .data/ keeps the queue for the next run.
`, s.APIURL, cmp.Or(s.ConsumerURL, "none in this stack (WR_DEV_CONSUMER=false)"), brokers, rds.Addr, rds.Kind, s.SchedulerURLs, adminToken, s.SchedulerURLs[0], s.URL, s.NotifierURL)
}
