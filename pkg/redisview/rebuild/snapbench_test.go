package rebuild_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
	"github.com/waitroom/waitroom/pkg/redisview/snapshot"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkRebuildLongHistory rebuilds one item whose record is long but
// whose line is short: WR_BENCH_HISTORY_N records (default 200,000;
// BENCHMARKS.md uses 1,000,000) of which all but WR_BENCH_LINE_N (default
// 10,000) registrations have left, then WR_BENCH_TAIL_N registrations
// (default 10,000) after the line's snapshot. "full" replays the whole
// record, "snapshot+tail" loads the snapshot and replays the tail; both
// rebuild the same line from the same kfake into the same redis-server.
func BenchmarkRebuildLongHistory(b *testing.B) {
	n, line, tail := envInt("WR_BENCH_HISTORY_N", 200_000), envInt("WR_BENCH_LINE_N", 10_000), envInt("WR_BENCH_TAIL_N", 10_000)
	ctx := context.Background()
	seeds := testenv.Kafka(b, 3)
	base := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	rdb := testenv.Redis(b)
	kc, err := kgo.NewClient(append(base, kgo.ProducerBatchMaxBytes(4<<20), kgo.MaxBufferedRecords(100_000))...)
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	it := topics.ItemState{V: 1, ItemID: "long", Name: "long", Stock: -1, Enabled: true, Version: 1, Policy: topics.AdmissionPolicy{RatePerSecond: 100, SessionTTLSeconds: 600}}
	if err := kc.ProduceSync(ctx, &kgo.Record{Topic: topics.Items, Key: []byte("long"), Value: topics.Encode(&it)}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	regs := (n + line) / 2 // regs registrations, regs-line leaves
	now := time.Now().UnixMilli()
	ev := func(kind string, i int) *kgo.Record {
		e := topics.RegistrationEvent{V: 1, Kind: kind, ItemID: "long", UserID: fmt.Sprintf("user-%07d", i), TokenID: fmt.Sprintf("TOKEN%021d", i), RequestedAt: now}
		return &kgo.Record{Topic: topics.Registrations, Key: []byte("long"), Value: topics.Encode(&e)}
	}
	// Registrations, each of all but the last line leaving a little later.
	produceAll(b, kc, func(yield func(*kgo.Record)) {
		left := 0
		for i := range regs {
			yield(ev(topics.KindRegister, i))
			if i >= 100 && left < regs-line {
				yield(ev(topics.KindLeave, left))
				left++
			}
		}
		for ; left < regs-line; left++ {
			yield(ev(topics.KindLeave, left))
		}
	})
	rb := rebuild.New(rdb, base, zap.NewNop())
	if _, err := rb.Run(ctx, rebuild.Options{Settle: time.Millisecond, FullReplay: true}); err != nil {
		b.Fatal(err)
	}
	sw := snapshot.NewWriter(rdb, kc, zap.NewNop())
	h, err := sw.Write(ctx, "long")
	if err != nil {
		b.Fatal(err)
	}
	produceAll(b, kc, func(yield func(*kgo.Record)) {
		for i := range tail {
			yield(ev(topics.KindRegister, regs+i))
		}
	})
	b.Logf("history %d records (%d registrations, line %d), snapshot of %d places in %d chunks, tail %d", n, regs, line, h.Entries, h.Chunks, tail)
	for _, c := range []struct {
		name string
		full bool
	}{{"full", true}, {"snapshot+tail", false}} {
		b.Run(c.name, func(b *testing.B) {
			var rep rebuild.Report
			for range b.N {
				if rep, err = rb.Run(ctx, rebuild.Options{Settle: time.Millisecond, FullReplay: c.full}); err != nil {
					b.Fatal(err)
				}
			}
			if w, _ := queue.New(rdb).Stats(ctx, "long"); w.Waiting != int64(line+tail) {
				b.Fatalf("rebuilt %d waiting, want %d", w.Waiting, line+tail)
			}
			if !c.full && rep.Snapshots != 1 {
				b.Fatalf("loaded %d snapshots, want 1", rep.Snapshots)
			}
			b.ReportMetric(rep.Took.Seconds(), "rebuild-s")
			b.ReportMetric(rep.ReadTook.Seconds(), "read-s")
			b.ReportMetric(float64(rep.Records), "records-read")
		})
	}
}
