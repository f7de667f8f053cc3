package queue_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// fillLine puts n waiting places straight into item's line: n tokens in the
// waiting ZSET and n place keys in the users hash, of the lengths the api
// makes (the benchmark measures Dump, not enqueue).
func fillLine(b *testing.B, rdb redis.UniversalClient, item string, n int) {
	ctx := context.Background()
	k := queue.KeysFor(item)
	for lo := 0; lo < n; lo += 10_000 {
		zs := make([]redis.Z, 0, 10_000)
		users := make([]any, 0, 20_000)
		for i := lo; i < min(lo+10_000, n); i++ {
			tok := fmt.Sprintf("TOKEN%021d", i)
			zs = append(zs, redis.Z{Score: float64(i + 1), Member: tok})
			users = append(users, fmt.Sprintf("user-%07d", i), tok)
		}
		if err := rdb.ZAdd(ctx, k.Waiting, zs...).Err(); err != nil {
			b.Fatal(err)
		}
		if err := rdb.HSet(ctx, k.Users, users...).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// commandUsec is redis-server's own time in each command so far
// (INFO commandstats: cmdstat_<name>:calls=…,usec=…).
func commandUsec(b *testing.B, rdb redis.UniversalClient) map[string]int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				out[name], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out
}

// mainCPU is the CPU time so far of pid's main thread (redis-server's
// command thread), from /proc/PID/schedstat: not counting the time it
// waited for a core, so a loaded machine changes it little.
func mainCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		b.Skipf("no schedstat: %v", err)
	}
	ns, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return time.Duration(ns)
}

// BenchmarkDumpHold: how long queue.Line.Dump (a snapshot's read) holds
// redis-server, by the line's entries (waiting places, each with its place
// key). hold-cpu-ms: redis-server's CPU in one MULTI of the COPYs of the
// two big keys as Dump makes them, the one hold that grows with the line
// (its command thread's CPU time: a quiet machine's hold); dump-cpu-ms: its
// CPU in the whole Dump (the MULTI, then the ZSCAN and HSCAN pages that read
// the copies, each page a short hold of its own); copy-ms and scan-ms: the
// same parts' wall time inside redis-server (INFO commandstats: a loaded
// machine's); held-ms: the longest a PING from another client waited
// meanwhile (the hold every other client sees, load included).
func BenchmarkDumpHold(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run("entries="+strconv.Itoa(n), func(b *testing.B) {
			srv := testenv.StartRedis(b)
			rdb := srv.Client()
			fillLine(b, rdb, "dump", n)
			l := queue.New(rdb)
			ctx := context.Background()
			probe := srv.Client()
			var held atomic.Int64
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					if err := probe.Ping(ctx).Err(); err != nil {
						return
					}
					if d := int64(time.Since(start)); d > held.Load() {
						held.Store(d)
					}
				}
			}()
			k := queue.KeysFor("dump")
			var hold time.Duration
			for range 3 {
				c0 := mainCPU(b, srv.PID())
				_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Do(ctx, "COPY", k.Users, k.Users+":x", "REPLACE")
					p.Do(ctx, "COPY", k.Waiting, k.Waiting+":x", "REPLACE")
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				hold += mainCPU(b, srv.PID()) - c0
				rdb.Unlink(ctx, k.Users+":x", k.Waiting+":x")
			}
			before := commandUsec(b, rdb)
			c0 := mainCPU(b, srv.PID())
			for b.Loop() {
				d, err := l.Dump(ctx, "dump", "wr:view:item:dump")
				if err != nil {
					b.Fatal(err)
				}
				if len(d.Waiting) != n || len(d.Users) != n {
					b.Fatalf("dumped %d waiting and %d users, want %d", len(d.Waiting), len(d.Users), n)
				}
			}
			dumpCPU := mainCPU(b, srv.PID()) - c0
			close(stop)
			<-done
			b.ReportMetric(hold.Seconds()*1000/3, "hold-cpu-ms")
			b.ReportMetric(dumpCPU.Seconds()*1000/float64(b.N), "dump-cpu-ms/op")
			after := commandUsec(b, rdb)
			per := func(cmds ...string) float64 {
				var us int64
				for _, c := range cmds {
					us += after[c] - before[c]
				}
				return float64(us) / 1000 / float64(b.N)
			}
			b.ReportMetric(per("copy"), "copy-ms/op")
			b.ReportMetric(per("zscan", "hscan"), "scan-ms/op")
			b.ReportMetric(float64(held.Load())/1e6, "held-ms")
		})
	}
}
