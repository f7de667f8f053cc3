package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/app/service"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/kafka/fence"
	"github.com/waitroom/waitroom/pkg/kafka/itemcache"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"github.com/waitroom/waitroom/pkg/redisview/snapshot"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/consumer/consume"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Config of the consumer service.
type Config struct {
	Addr           string        `env:"WR_CONSUMER_ADDR" envDefault:"127.0.0.1:8081"`
	Group          string        `env:"WR_CONSUMER_GROUP" envDefault:"waitroom-consumer"`
	ItemsGroup     string        `env:"WR_CONSUMER_ITEMS_GROUP" envDefault:"waitroom-items"`
	MaxPollRecords int           `env:"WR_CONSUMER_MAX_POLL_RECORDS" envDefault:"10000"`
	MaxBackoff     time.Duration `env:"WR_CONSUMER_MAX_BACKOFF" envDefault:"5s"`
	// FetchMaxBytes and FetchMaxPartitionBytes bound what the registrations
	// consumer fetches ahead of its handler, per broker and per partition
	// (franz-go buffers one fetch per broker until polled): a backlog after a
	// fault then holds a few MiB, not franz-go's 50 MiB per broker, and does
	// not set the process's RSS for minutes (GOGC=400 lets RSS follow the
	// heap live at the last collection). Zero takes these defaults.
	FetchMaxBytes          int32 `env:"WR_CONSUMER_FETCH_MAX_BYTES" envDefault:"1048576"`
	FetchMaxPartitionBytes int32 `env:"WR_CONSUMER_FETCH_MAX_PARTITION_BYTES" envDefault:"1048576"`
	// FetchMinBytes, above 1, has the broker hold a fetch of the
	// registrations until that many bytes are there or FetchWait passed
	// (franz-go's least is 10 ms). A batch then gathers more records, and
	// its fixed cost (a fetch, the view gate's and the apply's Redis round
	// trips, a commit) is shared by more of them: at 27,000 registrations a
	// second, about 300 records a batch instead of 50, and the consumer's CPU
	// per record half (BENCHMARKS.md). It costs up to FetchWait more of
	// PENDING, and an idle consumer fetches every FetchWait instead of every
	// 100 ms. 1 (or 0) answers a fetch as soon as one record is there.
	FetchMinBytes int32         `env:"WR_CONSUMER_FETCH_MIN_BYTES" envDefault:"16384"`
	FetchWait     time.Duration `env:"WR_CONSUMER_FETCH_WAIT" envDefault:"20ms"`
	// RecordAttempts and RecordBackoff bound the retries of a record Redis
	// refuses (a corrupt key) before it goes to the DLQ; zero takes the default.
	RecordAttempts int           `env:"WR_CONSUMER_RECORD_ATTEMPTS" envDefault:"3"`
	RecordBackoff  time.Duration `env:"WR_CONSUMER_RECORD_BACKOFF" envDefault:"100ms"`
	// InstanceID, when set, makes this replica a static member of its groups
	// (KIP-345): restarted with the same id (a pod's name), it takes back its
	// partitions at once instead of leaving them idle until the broker notices
	// the old member is gone. Unique per replica; empty: dynamic membership.
	InstanceID string `env:"WR_CONSUMER_INSTANCE_ID"`
	// SessionTimeout is how long the broker waits for a silent member (a
	// crashed one) before giving its partitions to the others; Heartbeat how
	// often a live member says it is there. Kafka's 45 s default left new
	// registrations PENDING for 43 s after a kill -9.
	SessionTimeout time.Duration `env:"WR_CONSUMER_SESSION_TIMEOUT" envDefault:"6s"`
	Heartbeat      time.Duration `env:"WR_CONSUMER_HEARTBEAT" envDefault:"1s"`
	// SchedulerTxnID is the schedulers' transactional id prefix (their own
	// variable and default): a rebuild fences their ids before it reads
	// waitroom.admissions (empty: fence.DefaultPrefix).
	SchedulerTxnID string `env:"WR_SCHEDULER_TRANSACTIONAL_ID" envDefault:"waitroom-scheduler"`
	View           view.Config
	Snapshot       snapshot.Config
	Kafka          config.Kafka
	Redis          config.Redis
	Log            config.Log
	HTTP           config.HTTP
}

// Validate checks what the environment cannot; the service refuses to start
// on an error.
func (c Config) Validate() error {
	switch {
	case c.Group == "" || c.ItemsGroup == "":
		return errors.New("WR_CONSUMER_GROUP and WR_CONSUMER_ITEMS_GROUP must not be empty")
	case c.Group == c.ItemsGroup:
		return fmt.Errorf("WR_CONSUMER_GROUP and WR_CONSUMER_ITEMS_GROUP must differ (both %q)", c.Group)
	case c.MaxPollRecords <= 0:
		return fmt.Errorf("WR_CONSUMER_MAX_POLL_RECORDS must be positive, not %d", c.MaxPollRecords)
	case c.FetchMaxBytes < 0 || c.FetchMaxPartitionBytes < 0:
		return fmt.Errorf("WR_CONSUMER_FETCH_MAX_BYTES (%d) and WR_CONSUMER_FETCH_MAX_PARTITION_BYTES (%d) must not be negative", c.FetchMaxBytes, c.FetchMaxPartitionBytes)
	case c.FetchMinBytes < 0 || (c.FetchMaxBytes > 0 && c.FetchMinBytes > c.FetchMaxBytes):
		return fmt.Errorf("WR_CONSUMER_FETCH_MIN_BYTES (%d) must be from 0 to WR_CONSUMER_FETCH_MAX_BYTES (%d)", c.FetchMinBytes, c.FetchMaxBytes)
	case c.FetchMinBytes > 1 && (c.FetchWait < 10*time.Millisecond || c.FetchWait > time.Second):
		// franz-go refuses a fetch wait under 10 ms.
		return fmt.Errorf("WR_CONSUMER_FETCH_WAIT must be from 10ms to 1s with WR_CONSUMER_FETCH_MIN_BYTES above 1, not %s", c.FetchWait)
	case c.MaxBackoff <= 0:
		return fmt.Errorf("WR_CONSUMER_MAX_BACKOFF must be positive, not %s", c.MaxBackoff)
	case c.RecordAttempts < 0:
		return fmt.Errorf("WR_CONSUMER_RECORD_ATTEMPTS must not be negative, not %d", c.RecordAttempts)
	case c.RecordBackoff < 0:
		return fmt.Errorf("WR_CONSUMER_RECORD_BACKOFF must not be negative, not %s", c.RecordBackoff)
	case c.SessionTimeout < 0 || c.Heartbeat < 0 || (c.SessionTimeout > 0 && c.SessionTimeout < time.Second):
		return fmt.Errorf("WR_CONSUMER_SESSION_TIMEOUT (%s) must be at least 1s and WR_CONSUMER_HEARTBEAT (%s) positive", c.SessionTimeout, c.Heartbeat)
	case c.SessionTimeout > 0 && c.Heartbeat > 0 && c.Heartbeat*3 > c.SessionTimeout:
		return fmt.Errorf("WR_CONSUMER_SESSION_TIMEOUT (%s) must be at least three WR_CONSUMER_HEARTBEAT (%s)", c.SessionTimeout, c.Heartbeat)
	case len(c.Kafka.Brokers) == 0:
		return errors.New("WR_KAFKA_BROKERS is empty")
	}
	return c.Redis.Validate()
}

// Run consumes until ctx ends. ln, when not nil, serves health and metrics
// instead of listening on cfg.Addr; ready, when not nil, is set once consuming.
func Run(ctx context.Context, cfg Config, ln net.Listener, log *zap.Logger, ready *httpserver.Readiness) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	a, err := service.Start(ctx, service.Parts{Name: "consumer", Addr: cfg.Addr, Kafka: cfg.Kafka, Redis: cfg.Redis, HTTP: cfg.HTTP}, ln, log, ready)
	if err != nil {
		return err
	}
	if err := build(ctx, cfg, a); err != nil {
		a.Close()
		return err
	}
	return a.Run(ctx)
}

// build adds the consumer's own parts to a: the DLQ producer, the item
// cache, the two group members, the view's record and its rebuild, and the
// two consuming loops.
func build(ctx context.Context, cfg Config, a *service.App) error {
	m, rdb, base, log := NewMetrics(a.Reg), a.Redis, a.Kafka, a.Log
	line := queue.New(rdb)
	dlqClient, err := newDLQProducer(ctx, cfg, base)
	if err != nil {
		return err
	}
	a.OnClose(dlqClient.Close)
	dl := dlq.NewWriter(dlqClient)
	items, err := itemcache.New(base, log.Named("items"))
	if err != nil {
		return err
	}
	own := &owned{parts: map[int32]bool{}}
	regs, itemsCl, err := groupConsumers(cfg, base, own.opts(m.forgetLag),
		[]kgo.Opt{kgo.OnPartitionsRevoked(m.forgetLagOf), kgo.OnPartitionsLost(m.forgetLagOf)})
	if err != nil {
		return err
	}
	a.OnClose(regs.Close)
	a.OnClose(itemsCl.Close)
	admCl, err := kgo.NewClient(base...)
	if err != nil {
		return fmt.Errorf("kafka admin client: %w", err)
	}
	a.OnClose(admCl.Close)
	// The record reads what the view has not applied before judging it behind:
	// a dead leader's abort marker is no missed admission.
	// A committed tick the view holds already (its leader's advance of the
	// marker failed) is no missed admission either.
	record := view.NewKafkaRecord(kadm.NewClient(admCl), cfg.Group, 0).ReadGaps(base).Reflects(view.HeldTicks(line))
	watch := a.Watch(view.Options{Interval: cfg.View.CheckInterval, Record: record})
	opts := func(topic string) consume.Options { return consumeOptions(cfg, m, topic) }
	retry := Retry{Attempts: cfg.RecordAttempts, Backoff: cfg.RecordBackoff}
	a.Go(items.Run)
	a.Go(func(ctx context.Context) error {
		return AutoRebuild(ctx, rdb, watch, record, base, cmp.Or(cfg.SchedulerTxnID, fence.DefaultPrefix), a.Reg, log)
	})
	// The DLQ's producer (acks from every in-sync replica) writes the snapshots too.
	sw, adm := snapshot.NewWriter(rdb, dlqClient, log.Named("snapshot")), kadm.NewClient(admCl)
	a.Go(func(ctx context.Context) error {
		return writeSnapshots(ctx, sw, cfg.Snapshot.Interval, watch, adm, own, items)
	})
	a.Go(func(ctx context.Context) error {
		return consume.Run(ctx, itemsCl, WaitView(rdb, watch, NewItemStates(line, dl, m, log, retry).Handle), log.Named("items"), opts(topics.Items))
	})
	a.Go(func(ctx context.Context) error {
		// Load the scripts and know the items before the first registration;
		// both are retried by the runner later, so failures here only delay.
		if err := line.Load(ctx); err != nil {
			log.Warn("load scripts (will retry on first batch)", zap.Error(err))
		}
		if err := items.Sync(ctx); err != nil && ctx.Err() == nil {
			log.Warn("item cache not synced before consuming", zap.Error(err))
		}
		a.Ready.Set(true)
		log.Info("consumer ready", zap.String("group", cfg.Group))
		return consume.Run(ctx, regs, Gated(rdb, watch, NewRegistrations(rdb, items, dl, m, log, retry).Handle), log.Named("registrations"), opts(topics.Registrations))
	})
	return nil
}

// writeSnapshots writes a snapshot of each line of the partitions own holds
// every interval while the view is trusted, until ctx ends.
func writeSnapshots(ctx context.Context, sw *snapshot.Writer, every time.Duration, watch *view.Watcher, adm *kadm.Client, own *owned, items *itemcache.Cache) error {
	return sw.Run(ctx, every, func() []string {
		if ok, _, _ := watch.Ready(); !ok {
			return nil
		}
		return own.items(ctx, adm, slices.Collect(maps.Keys(items.All())))
	})
}

// newDLQProducer is the producer of the dead-letter topics, checked against
// the cluster.
func newDLQProducer(ctx context.Context, cfg Config, base []kgo.Opt) (*kgo.Client, error) {
	return kclient.NewChecked(ctx, cfg.Kafka, "dlq producer", append(base, kgo.RequiredAcks(kgo.AllISRAcks()))...)
}

// The defaults of Config.FetchMaxBytes and FetchMaxPartitionBytes, for a
// Config built by hand.
const (
	defaultFetchMaxBytes          = 1048576
	defaultFetchMaxPartitionBytes = 1048576
)

// groupConsumers are the group members that consume waitroom.registrations
// (cfg.Group, with regsOpts) and waitroom.items (cfg.ItemsGroup, with itemsOpts).
func groupConsumers(cfg Config, base, regsOpts, itemsOpts []kgo.Opt) (regs, items *kgo.Client, err error) {
	// Zero (a config built by hand) takes the defaults of the env tags.
	session, heartbeat := cmp.Or(cfg.SessionTimeout, 6*time.Second), cmp.Or(cfg.Heartbeat, time.Second)
	member := func(suffix string) []kgo.Opt {
		o := []kgo.Opt{kgo.SessionTimeout(session), kgo.HeartbeatInterval(heartbeat)}
		if cfg.InstanceID != "" {
			o = append(o, kgo.InstanceID(cfg.InstanceID+suffix))
		}
		return o
	}
	fetch := []kgo.Opt{kgo.FetchMaxBytes(cmp.Or(cfg.FetchMaxBytes, defaultFetchMaxBytes)),
		kgo.FetchMaxPartitionBytes(cmp.Or(cfg.FetchMaxPartitionBytes, defaultFetchMaxPartitionBytes))}
	if cfg.FetchMinBytes > 1 { // after GroupOpts: its 100 ms wait is for an idle partition
		fetch = append(fetch, kgo.FetchMinBytes(cfg.FetchMinBytes), kgo.FetchMaxWait(cfg.FetchWait))
	}
	regs, err = kgo.NewClient(slices.Concat(base, consume.GroupOpts(cfg.Group, topics.Registrations), member(""), fetch, regsOpts)...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka registrations consumer: %w", err)
	}
	items, err = kgo.NewClient(slices.Concat(base, consume.GroupOpts(cfg.ItemsGroup, topics.Items), member("-items"), itemsOpts)...)
	if err != nil {
		regs.Close()
		return nil, nil, fmt.Errorf("kafka items consumer: %w", err)
	}
	return regs, items, nil
}

// consumeOptions are the runner's options for topic, counting retries and
// lag in m.
func consumeOptions(cfg Config, m *Metrics, topic string) consume.Options {
	return consume.Options{
		MaxPollRecords: cfg.MaxPollRecords, MaxBackoff: cfg.MaxBackoff,
		OnRetry: func(int32, int, error) { m.retries.WithLabelValues(topic).Inc() },
		OnLag: func(t string, p int32, lag int64) {
			m.lag.WithLabelValues(t, strconv.Itoa(int(p))).Set(float64(lag))
		},
	}
}
