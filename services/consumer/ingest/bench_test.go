package ingest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// BenchmarkHotItemConsumer is one hot item's consumer throughput: WR_BENCH_CONSUMER_N
// (default 200,000) register records of one item are produced to kfake over
// TCP first, then the consumer service itself (ingest.Run, with its default
// config) is started against them and a redis-server of its own, and applies
// them all. It reports the records applied per second from the first batch
// seen in Redis to the last (records/s), the same over the whole run from the
// service's start (whole-records/s, group join and script load included), and
// redis-server's CPU (INFO cpu, main thread) and script time (INFO
// commandstats) per record over the steady part, and this process's CPU per
// record over the same part (proc-cpu-µs/record: the consumer, kfake serving
// its fetches, the Go runtime; getrusage), and over the whole run from the
// service's start (whole-proc-cpu-µs/record: the fetches and decoding of the
// records the consumer read ahead of the first batch seen included, and its
// start-up).
func BenchmarkHotItemConsumer(b *testing.B) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("WR_BENCH_CONSUMER_N")); err == nil && v > 0 {
		n = v
	}
	config.TuneGC() // as service.Main does
	var rate, whole, cpu, lua, proc, wholeProc float64
	for range b.N {
		b.StopTimer()
		r := hotItemRun(b, n)
		rate += r.rate
		whole += r.whole
		cpu += r.cpuPerRec
		lua += r.luaPerRec
		proc += r.procPerRec
		wholeProc += r.wholeProcPerRec
	}
	k := float64(b.N)
	b.ReportMetric(rate/k, "records/s")
	b.ReportMetric(whole/k, "whole-records/s")
	b.ReportMetric(cpu/k, "redis-cpu-µs/record")
	b.ReportMetric(lua/k, "lua-µs/record")
	b.ReportMetric(proc/k, "proc-cpu-µs/record")
	b.ReportMetric(wholeProc/k, "whole-proc-cpu-µs/record")
}

type hotItemResult struct{ rate, whole, cpuPerRec, luaPerRec, procPerRec, wholeProcPerRec float64 }

// hotItemRun produces n registrations of one item, then runs the consumer
// until it applied them all; the benchmark timer runs while it consumes.
func hotItemRun(b *testing.B, n int) hotItemResult {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	brokers := testenv.Kafka(b, 6)
	srv := testenv.StartRedis(b)
	rdb := srv.Client()
	kc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(4<<20), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	const item = "hot"
	it := topics.ItemState{V: 1, ItemID: item, Name: item, Stock: topics.Unlimited, Enabled: true, Version: 1, UpdatedAt: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 100, SessionTTLSeconds: 600}}
	if err := kc.ProduceSync(ctx, &kgo.Record{Topic: topics.Items, Key: []byte(item), Value: topics.Encode(&it)}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	now := time.Now().UnixMilli()
	errs := make(chan error, 1)
	for i := range n {
		ev := topics.RegistrationEvent{V: topics.Version, Kind: topics.KindRegister, ItemID: item, UserID: fmt.Sprintf("user-%07d", i),
			TokenID: fmt.Sprintf("TOKEN%021d", i), RequestedAt: now, Client: &topics.ClientMeta{IP: "127.0.0.1"}}
		kc.Produce(ctx, &kgo.Record{Topic: topics.Registrations, Key: []byte(item), Value: topics.Encode(&ev)}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := kc.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}

	cfg, err := config.Defaults[ingest.Config]()
	if err != nil {
		b.Fatal(err)
	}
	cfg.Kafka.Brokers, cfg.Kafka.ClientID = brokers, "bench"
	cfg.Redis.Addr = srv.Addr
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	seq := queue.KeysFor(item).Seq
	b.StartTimer()
	start, procStart := time.Now(), testenv.ProcCPU(b)
	go func() { done <- ingest.Run(runCtx, cfg, ln, zap.NewNop(), nil) }()
	var first time.Time
	var firstN int64
	var before testenv.RedisStats
	var proc0 time.Duration
	for {
		got, err := rdb.Get(ctx, seq).Int64()
		if err != nil && err != redis.Nil {
			b.Fatal(err)
		}
		if got > 0 && first.IsZero() {
			first, firstN, before, proc0 = time.Now(), got, testenv.ReadRedisStats(b, rdb), testenv.ProcCPU(b)
		}
		if got >= int64(n) {
			break
		}
		select {
		case err := <-done:
			b.Fatalf("consumer stopped after %d of %d: %v", got, n, err)
		case <-ctx.Done():
			b.Fatalf("applied %d of %d before the timeout", got, n)
		case <-time.After(2 * time.Millisecond):
		}
	}
	end := time.Now()
	b.StopTimer()
	after, proc1 := testenv.ReadRedisStats(b, rdb), testenv.ProcCPU(b)
	luaBefore, _ := before.Scripts()
	luaAfter, _ := after.Scripts()
	stop()
	if err := <-done; err != nil {
		b.Fatalf("consumer: %v", err)
	}
	if w, err := queue.New(rdb).Stats(ctx, item); err != nil || w.Waiting != int64(n) {
		b.Fatalf("%d waiting (%v), want %d", w.Waiting, err, n)
	}
	steady := float64(int64(n) - firstN)
	if steady <= 0 {
		b.Fatalf("all %d applied in the first batch seen: raise WR_BENCH_CONSUMER_N", n)
	}
	b.Logf("%d records: first %d seen %.2fs after start, rest at %.0f/s; whole run %.2fs", n, firstN,
		first.Sub(start).Seconds(), steady/end.Sub(first).Seconds(), end.Sub(start).Seconds())
	return hotItemResult{
		rate:            steady / end.Sub(first).Seconds(),
		whole:           float64(n) / end.Sub(start).Seconds(),
		cpuPerRec:       (after.MainCPU - before.MainCPU) * 1e6 / steady,
		luaPerRec:       float64(luaAfter-luaBefore) / steady,
		procPerRec:      float64((proc1 - proc0).Microseconds()) / steady,
		wholeProcPerRec: float64((proc1 - procStart).Microseconds()) / float64(n),
	}
}
