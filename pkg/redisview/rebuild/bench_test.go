package rebuild_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// produceAll produces every record recs yields with kc and waits for all.
func produceAll(b *testing.B, kc *kgo.Client, recs func(yield func(*kgo.Record))) {
	b.Helper()
	ctx := context.Background()
	errs := make(chan error, 1)
	recs(func(r *kgo.Record) {
		kc.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	})
	if err := kc.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// BenchmarkRebuild rebuilds a line of WR_BENCH_REBUILD_N registrations (default
// 100,000; BENCHMARKS.md uses 1,000,000) of one item from kfake into a real
// redis-server and reports records/s.
func BenchmarkRebuild(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("WR_BENCH_REBUILD_N")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	seeds := testenv.Kafka(b, 3)
	rdb := testenv.Redis(b)
	kc, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ProducerBatchMaxBytes(4<<20), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	it := topics.ItemState{V: 1, ItemID: "big", Name: "big", Stock: -1, Enabled: true, Version: 1, Policy: topics.AdmissionPolicy{RatePerSecond: 100, SessionTTLSeconds: 600}}
	if err := kc.ProduceSync(ctx, &kgo.Record{Topic: topics.Items, Key: []byte("big"), Value: topics.Encode(&it)}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	now := time.Now().UnixMilli()
	produceAll(b, kc, func(yield func(*kgo.Record)) {
		for i := range n {
			ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, ItemID: "big", UserID: fmt.Sprintf("user-%07d", i),
				TokenID: fmt.Sprintf("TOKEN%021d", i), RequestedAt: now}
			yield(&kgo.Record{Topic: topics.Registrations, Key: []byte("big"), Value: topics.Encode(&ev)})
		}
	})
	rb := rebuild.New(rdb, []kgo.Opt{kgo.SeedBrokers(seeds...)}, zap.NewNop())
	mem0 := usedMemory(b, rdb)
	st0 := testenv.ReadRedisStats(b, rdb)
	cpu0, proc0 := st0.CPU, testenv.ProcCPU(b)
	sched0 := redisSched(b, rdb)
	b.ResetTimer()
	var rep rebuild.Report
	for range b.N {
		if rep, err = rb.Run(ctx, rebuild.Options{Settle: time.Millisecond}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	sched := redisSched(b, rdb)
	st := testenv.ReadRedisStats(b, rdb)
	cpu, proc := time.Duration((st.CPU-cpu0)*float64(time.Second)), testenv.ProcCPU(b)-proc0
	logRedisWork(b, st0, st, rep.Records*int64(b.N))
	if w, _ := queue.New(rdb).Stats(ctx, "big"); w.Waiting != int64(n) {
		b.Fatalf("rebuilt %d waiting, want %d", w.Waiting, n)
	}
	reportBytes(b, rdb, mem0, n)
	b.ReportMetric(float64(rep.Records)/rep.Took.Seconds(), "records/s")
	b.ReportMetric(rep.ReadTook.Seconds(), "read-s")
	b.ReportMetric(rep.WriteTook.Seconds(), "write-s")
	// redis-server's own CPU per record: what the scripts cost, whatever
	// else shares the machine's cores.
	b.ReportMetric(cpu.Seconds()*1e6/float64(rep.Records)/float64(b.N), "redis-µs/record")
	// This process's CPU per record: reading and decoding the topics, kfake
	// serving the fetches, building the script calls.
	b.ReportMetric(proc.Seconds()*1e6/float64(rep.Records)/float64(b.N), "proc-cpu-µs/record")
	// Of the rebuild's time, the share redis-server's main thread ran, and
	// the share it was ready to run but waited for a core (the scheduler's
	// run queue): the rest it slept, with no command to run, waiting for
	// this process.
	if took := rep.Took * time.Duration(b.N); sched.ok && sched0.ok && took > 0 {
		b.ReportMetric(100*float64(sched.run-sched0.run)/float64(took), "redis-run-%")
		b.ReportMetric(100*float64(sched.wait-sched0.wait)/float64(took), "redis-runq-%")
	}
}

// usedMemory is rdb's INFO memory used_memory: the bytes its allocator
// holds for data.
func usedMemory(b *testing.B, rdb redis.UniversalClient) int64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	_, rest, _ := strings.Cut(info, "used_memory:")
	v, _, _ := strings.Cut(rest, "\r\n")
	m, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		b.Fatalf("used_memory %q: %v", v, err)
	}
	return m
}

// reportBytes reports the bytes of redis-server's memory the rebuilt line
// of item "big" takes a place (used_memory since mem0, over n places), and
// of that its users hash's and waiting set's (MEMORY USAGE, every member
// counted): a load-independent measure of the memory work a replayed record
// does.
func reportBytes(b *testing.B, rdb redis.UniversalClient, mem0 int64, n int) {
	b.Helper()
	ctx := context.Background()
	b.ReportMetric(float64(usedMemory(b, rdb)-mem0)/float64(n), "B/place")
	k := queue.KeysFor("big")
	for _, key := range []struct{ name, key string }{{"users", k.Users}, {"waiting", k.Waiting}} {
		v, err := rdb.MemoryUsage(ctx, key.key, 0).Result()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(v)/float64(n), key.name+"-B/place")
	}
}

// sched is a thread's time on a core and ready but waiting for one
// (/proc/PID/schedstat); ok is false where the file cannot be read.
type sched struct {
	run, wait time.Duration
	ok        bool
}

// redisSched reads the schedstat of rdb's redis-server main thread (when it
// runs on this machine, as testenv's does).
func redisSched(b *testing.B, rdb redis.UniversalClient) sched {
	b.Helper()
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		b.Fatal(err)
	}
	_, rest, _ := strings.Cut(info, "process_id:")
	pid, _, _ := strings.Cut(rest, "\r\n")
	raw, err := os.ReadFile("/proc/" + strings.TrimSpace(pid) + "/schedstat")
	if err != nil {
		return sched{}
	}
	var run, wait int64
	if _, err := fmt.Sscan(string(raw), &run, &wait); err != nil {
		return sched{}
	}
	return sched{time.Duration(run), time.Duration(wait), true}
}

// logRedisWork logs where redis-server's time went per record between two
// INFO reads: its main thread's CPU, the scripts' usec (commandstats, wall
// time) and, of that, the commands the scripts ran, by name.
func logRedisWork(b *testing.B, st0, st testenv.RedisStats, records int64) {
	b.Helper()
	if records == 0 {
		return
	}
	per := func(usec int64) float64 { return float64(usec) / float64(records) }
	scripts0, _ := st0.Scripts()
	scripts, _ := st.Scripts()
	var parts []string
	inside := int64(0)
	for name, u := range st.Usec {
		if testenv.IsScriptCmd(name) || u == st0.Usec[name] {
			continue
		}
		inside += u - st0.Usec[name]
		parts = append(parts, fmt.Sprintf("%s %.2f", name, per(u-st0.Usec[name])))
	}
	sort.Strings(parts)
	b.Logf("per record: main thread %.2f cpu-µs, scripts %.2f µs, of which and beside them commands %.2f (%s)",
		(st.MainCPU-st0.MainCPU)*1e6/float64(records), per(scripts-scripts0), per(inside), strings.Join(parts, ", "))
}
