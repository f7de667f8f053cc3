package ingest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
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

// BenchmarkSpikePending is how long the N-th arrival of a spike stays PENDING
// (its registration acknowledged by Kafka, so the api has answered 202, but
// not yet applied to the line) after the api. WR_BENCH_SPIKE_N (default
// 500,000) register records of one item are produced to kfake over TCP at a
// fixed WR_BENCH_SPIKE_RATE a second (default 50,000; an open loop: record i
// is due at i/rate from the start, whatever the broker's acks do) with the
// api's producer settings (acks=all, no linger), while the consumer service
// (ingest.Run with its default config, started and joined first) applies them
// to a redis-server of its own. A sampler reads the item's seq (the count of
// places given, one per new registration, in record order: the N-th record of
// the item's one partition is applied when seq reaches N) about every
// millisecond.
//
// For N = 1, 1k, 10k, 100k, 500k, 1M (those ≤ WR_BENCH_SPIKE_N) and the last,
// it reports the time from the record's due time to applied
// (due→applied-ms@N) and from its ack to applied (ack→applied-ms@N: PENDING
// as the person sees it, the api's own time excluded), the p50/p99/max of
// due→applied over every record, the apply rate over the spike (applied/s),
// the most applied in any second (peak-applied/s), how far the sender fell
// behind schedule at worst (sender-behind-ms), and the CPU per record of
// redis-server's main thread and of this process (the consumer, kfake and the
// producer together). The sampler's resolution (~1 ms plus a Redis round
// trip) is in every figure. WR_BENCH_FETCH_MIN_BYTES, when set, is the
// consumer's WR_CONSUMER_FETCH_MIN_BYTES (1: every fetch answered at once,
// against the default's gathering).
func BenchmarkSpikePending(b *testing.B) {
	n, rate := envInt("WR_BENCH_SPIKE_N", 500_000), envInt("WR_BENCH_SPIKE_RATE", 50_000)
	config.TuneGC() // as service.Main does
	for range b.N {
		b.StopTimer()
		r := spikeRun(b, n, rate)
		for _, c := range r.checks {
			b.ReportMetric(c.dueMs, fmt.Sprintf("due→applied-ms@%d", c.n))
			b.ReportMetric(c.ackMs, fmt.Sprintf("ack→applied-ms@%d", c.n))
		}
		b.ReportMetric(r.p50, "due→applied-p50-ms")
		b.ReportMetric(r.p99, "due→applied-p99-ms")
		b.ReportMetric(r.max, "due→applied-max-ms")
		b.ReportMetric(r.rate, "applied/s")
		b.ReportMetric(r.peak, "peak-applied/s")
		b.ReportMetric(r.behindMs, "sender-behind-ms")
		b.ReportMetric(r.redisCPU, "redis-cpu-µs/record")
		b.ReportMetric(r.procCPU, "proc-cpu-µs/record")
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

type spikeCheck struct {
	n            int
	dueMs, ackMs float64
}

type spikeResult struct {
	checks                      []spikeCheck
	p50, p99, max, rate, peak   float64
	behindMs, redisCPU, procCPU float64
}

// seqSample is the item's seq read at t (from the spike's start).
type seqSample struct {
	t   time.Duration
	seq int64
}

// spikeRun runs one spike of n records at rate a second and measures it.
func spikeRun(b *testing.B, n, rate int) spikeResult {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	brokers := testenv.Kafka(b, 6)
	srv := testenv.StartRedis(b)
	rdb := srv.Client()
	kc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topics.Registrations),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0), kgo.RecordRetries(10))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	const item, warm = "spike", "warm"
	for _, id := range []string{item, warm} {
		it := topics.ItemState{V: 1, ItemID: id, Name: id, Stock: topics.Unlimited, Enabled: true, Version: 1, UpdatedAt: 1,
			Policy: topics.AdmissionPolicy{RatePerSecond: 100, SessionTTLSeconds: 600}}
		if err := kc.ProduceSync(ctx, &kgo.Record{Topic: topics.Items, Key: []byte(id), Value: topics.Encode(&it)}).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	stopConsumer := startConsumer(ctx, b, brokers, srv.Addr)
	defer stopConsumer()
	// The consumer has joined its group and loaded its scripts once a
	// registration of another item is applied: the spike starts from there.
	if err := kc.ProduceSync(ctx, spikeRecord(warm, 0, time.Now())).FirstErr(); err != nil {
		b.Fatal(err)
	}
	waitSeq(ctx, b, rdb, warm, 1)

	redis0, proc0 := testenv.ReadRedisStats(b, rdb), testenv.ProcCPU(b)
	start := time.Now()
	samples := make(chan []seqSample, 1)
	go func() { samples <- sampleSeq(ctx, rdb, item, int64(n), start) }()
	b.StartTimer()
	acks, behind := produceAtRate(ctx, b, kc, item, n, rate, start)
	got := <-samples
	b.StopTimer()
	redis1, proc1 := testenv.ReadRedisStats(b, rdb), testenv.ProcCPU(b)
	if last := got[len(got)-1]; last.seq < int64(n) {
		b.Fatalf("applied %d of %d", last.seq, n)
	}
	r := spikeFigures(got, acks, n, rate)
	r.behindMs = float64(behind.Microseconds()) / 1e3
	r.redisCPU = (redis1.MainCPU - redis0.MainCPU) * 1e6 / float64(n)
	r.procCPU = float64((proc1 - proc0).Microseconds()) / float64(n)
	if w, err := queue.New(rdb).Stats(ctx, item); err != nil || w.Waiting != int64(n) {
		b.Fatalf("%d waiting (%v), want %d", w.Waiting, err, n)
	}
	return r
}

// startConsumer runs the consumer service as its package runs it, with its
// default config, until the returned stop is called.
func startConsumer(ctx context.Context, b *testing.B, brokers []string, redisAddr string) func() {
	cfg, err := config.Defaults[ingest.Config]()
	if err != nil {
		b.Fatal(err)
	}
	cfg.Kafka.Brokers, cfg.Kafka.ClientID = brokers, "bench"
	cfg.Redis.Addr = redisAddr
	cfg.FetchMinBytes = int32(envInt("WR_BENCH_FETCH_MIN_BYTES", int(cfg.FetchMinBytes)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ingest.Run(runCtx, cfg, ln, zap.NewNop(), nil) }()
	return func() {
		stop()
		if err := <-done; err != nil {
			b.Errorf("consumer: %v", err)
		}
	}
}

func spikeRecord(item string, i int, due time.Time) *kgo.Record {
	ev := topics.RegistrationEvent{V: topics.Version, Kind: topics.KindRegister, ItemID: item, UserID: fmt.Sprintf("user-%07d", i),
		TokenID: fmt.Sprintf("TOKEN%021d", i), RequestedAt: due.UnixMilli(), Client: &topics.ClientMeta{IP: "127.0.0.1"}}
	return &kgo.Record{Key: []byte(item), Value: topics.Encode(&ev)}
}

// waitSeq waits until the item's seq reaches n.
func waitSeq(ctx context.Context, b *testing.B, rdb *redis.Client, item string, n int64) {
	key := queue.KeysFor(item).Seq
	for {
		got, err := rdb.Get(ctx, key).Int64()
		if err != nil && err != redis.Nil {
			b.Fatal(err)
		}
		if got >= n {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("%s: seq %d of %d before the timeout", item, got, n)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// sampleSeq reads the item's seq about every millisecond until it reaches n
// (or ctx ends, or it has not moved for spikeStall: records lost or a
// consumer stuck fail the run then, not at the timeout), keeping each change
// with its time from start.
func sampleSeq(ctx context.Context, rdb *redis.Client, item string, n int64, start time.Time) []seqSample {
	key := queue.KeysFor(item).Seq
	out := []seqSample{{0, 0}}
	for ctx.Err() == nil && time.Since(start)-out[len(out)-1].t < spikeStall {
		got, err := rdb.Get(ctx, key).Int64()
		t := time.Since(start)
		if err == nil && got > out[len(out)-1].seq {
			out = append(out, seqSample{t, got})
			if got >= n {
				break
			}
		}
		time.Sleep(time.Millisecond)
	}
	return out
}

// spikeStall is how long the line may stand still before a run gives up.
const spikeStall = 30 * time.Second

// produceAtRate produces record i of the item at start + i/rate (open loop)
// and returns each record's ack time from start, once every one is acked,
// and how far behind schedule the sender was at worst.
func produceAtRate(ctx context.Context, b *testing.B, kc *kgo.Client, item string, n, rate int,
	start time.Time) ([]time.Duration, time.Duration) {
	acks := make([]time.Duration, n)
	var wg sync.WaitGroup
	var failed atomic.Value
	wg.Add(n)
	var behind time.Duration
	for sent := 0; sent < n; {
		due := min(int(time.Since(start).Seconds()*float64(rate))+1, n)
		for ; sent < due; sent++ {
			at := start.Add(time.Duration(sent) * time.Second / time.Duration(rate))
			behind = max(behind, time.Since(at))
			i := sent
			kc.Produce(ctx, spikeRecord(item, i, at), func(_ *kgo.Record, err error) {
				acks[i] = time.Since(start) // read after wg.Wait
				if err != nil {
					failed.Store(err)
				}
				wg.Done()
			})
		}
		time.Sleep(200 * time.Microsecond)
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return acks, behind
}

// spikeFigures turns the seq samples and ack times into the report: record
// N (1-based) is applied at the first sample whose seq is ≥ N.
func spikeFigures(got []seqSample, acks []time.Duration, n, rate int) spikeResult {
	applied := make([]time.Duration, n+1)
	for k := 1; k < len(got); k++ {
		for i := got[k-1].seq + 1; i <= min(got[k].seq, int64(n)); i++ {
			applied[i] = got[k].t
		}
	}
	due := func(i int) time.Duration { return time.Duration(i-1) * time.Second / time.Duration(rate) }
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	var r spikeResult
	for _, c := range []int{1, 1_000, 10_000, 100_000, 500_000, 1_000_000, n} {
		if c > n || (len(r.checks) > 0 && r.checks[len(r.checks)-1].n == c) {
			continue
		}
		r.checks = append(r.checks, spikeCheck{n: c, dueMs: ms(applied[c] - due(c)), ackMs: ms(applied[c] - acks[c-1])})
	}
	lat := make([]float64, n)
	for i := 1; i <= n; i++ {
		lat[i-1] = ms(applied[i] - due(i))
	}
	slices.Sort(lat)
	r.p50, r.p99, r.max = lat[n/2], lat[n*99/100], lat[n-1]
	r.rate = float64(n-1) / (applied[n] - applied[1]).Seconds()
	for k, j := 1, 1; k < len(got); k++ { // the most applied within one second
		for got[k].t-got[j].t > time.Second {
			j++
		}
		r.peak = max(r.peak, float64(got[k].seq-got[j].seq))
	}
	return r
}
