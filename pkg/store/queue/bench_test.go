package queue_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// fillWaiting puts n tokens straight into item's waiting ZSET (the benchmark
// measures promote, not enqueue).
func fillWaiting(b *testing.B, rdb redis.UniversalClient, item string, n int) {
	ctx := context.Background()
	k := queue.KeysFor(item)
	for lo := 0; lo < n; lo += 10_000 {
		zs := make([]redis.Z, 0, 10_000)
		for i := lo; i < min(lo+10_000, n); i++ {
			zs = append(zs, redis.Z{Score: float64(i + 1), Member: fmt.Sprintf("tok-%07d", i)})
		}
		if err := rdb.ZAdd(ctx, k.Waiting, zs...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	if err := rdb.SAdd(ctx, queue.ActiveItems, item).Err(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPromoteMillionLine: one leader draining a line of 1,000,000 at a
// rate that never binds; each op is one tick of 10 ms (1,000 admitted).
func BenchmarkPromoteMillionLine(b *testing.B) {
	rdb := testenv.Redis(b)
	l := queue.New(rdb)
	ctx := context.Background()
	if _, err := l.ApplyItem(ctx, topics.ItemState{ItemID: "big", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 100_000, SessionTTLSeconds: 600}}); err != nil {
		b.Fatal(err)
	}
	fillWaiting(b, rdb, "big", 1_000_000)
	now := time.Now()
	admitted := 0
	b.ResetTimer()
	for b.Loop() {
		now = now.Add(10 * time.Millisecond)
		tk, err := l.Promote(ctx, "big", 1, now, 10*time.Millisecond)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.AckPublished(ctx, 1, []string{"big"}, []int{len(tk.Unpublished)}); err != nil {
			b.Fatal(err)
		}
		if tk.Admitted == 0 {
			b.Fatal("line ran dry: lower -benchtime")
		}
		admitted += tk.Admitted
	}
	b.ReportMetric(float64(admitted)/b.Elapsed().Seconds(), "admitted/s")
}

// BenchmarkTick1000Items: one scheduler tick (a pipelined promote round per
// 500 items, then the acks) over 1,000 active items. busy/1000: all of them
// admit every tick (the worst case); busy/10: ten do, the rest are idle.
func BenchmarkTick1000Items(b *testing.B) {
	for _, busy := range []int{1000, 10} {
		b.Run(fmt.Sprintf("busy=%d", busy), func(b *testing.B) { benchTick(b, 1000, busy) })
	}
}

func benchTick(b *testing.B, n, busy int) {
	rdb := testenv.Redis(b)
	l := queue.New(rdb)
	ctx := context.Background()
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf("item-%04d", i)
		if _, err := l.ApplyItem(ctx, topics.ItemState{ItemID: items[i], Stock: -1, Enabled: true, Version: 1,
			Policy: topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 100_000, SessionTTLSeconds: 600}}); err != nil {
			b.Fatal(err)
		}
		if i < busy {
			fillWaiting(b, rdb, items[i], 2000)
		} else if err := rdb.SAdd(ctx, queue.ActiveItems, items[i]).Err(); err != nil {
			b.Fatal(err)
		}
	}
	now := time.Now()
	b.ResetTimer()
	for b.Loop() {
		now = now.Add(200 * time.Millisecond)
		for lo := 0; lo < len(items); lo += 500 {
			batch := items[lo : lo+500]
			ticks, errs, err := l.PromoteMany(ctx, batch, 1, now, time.Second)
			if err != nil {
				b.Fatal(err)
			}
			var acked []string // as the scheduler: only items that had an event
			var counts []int
			for i := range ticks {
				if errs[i] != nil {
					b.Fatal(errs[i])
				}
				if len(ticks[i].Unpublished) > 0 {
					acked, counts = append(acked, batch[i]), append(counts, len(ticks[i].Unpublished))
				}
			}
			if err := l.AckPublished(ctx, 1, acked, counts); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/tick")
}

// BenchmarkPromoteTick100000: one promote tick admitting 100,000 at once (a
// drop at 100,000/s after idle), run as 20,000-a-call slices, against the
// same data move done by plain pipelined commands (baseline: ZPOPMIN, ZADD
// and RPUSH in chunks of 1,000, not atomic, no budget).
func BenchmarkPromoteTick100000(b *testing.B) {
	const n = 100_000
	rdb := testenv.Redis(b)
	l := queue.New(rdb)
	ctx := context.Background()
	if _, err := l.ApplyItem(ctx, topics.ItemState{ItemID: "tick", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: n, SessionTTLSeconds: 600}}); err != nil {
		b.Fatal(err)
	}
	k := queue.KeysFor("tick")
	reset := func(b *testing.B) {
		b.StopTimer()
		if err := rdb.Del(ctx, k.Waiting, k.Admitted, k.Unpublished, k.Pace, k.Paced, k.Head).Err(); err != nil {
			b.Fatal(err)
		}
		fillWaiting(b, rdb, "tick", n)
		b.StartTimer()
	}
	b.Run("promote", func(b *testing.B) {
		now := time.Now()
		for i := 0; i < b.N; i++ {
			reset(b)
			now = now.Add(time.Minute)
			tk, err := l.Promote(ctx, "tick", 1, now, time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if tk.Admitted != n {
				b.Fatalf("admitted %d, want %d", tk.Admitted, n)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "admitted/s")
	})
	b.Run("baseline", func(b *testing.B) {
		exp := float64(time.Now().Add(10 * time.Minute).UnixMilli())
		for i := 0; i < b.N; i++ {
			reset(b)
			for lo := 0; lo < n; lo += 1000 {
				popped, err := rdb.ZPopMin(ctx, k.Waiting, 1000).Result()
				if err != nil {
					b.Fatal(err)
				}
				zs := make([]redis.Z, len(popped))
				ids := make([]any, len(popped))
				for j, z := range popped {
					zs[j], ids[j] = redis.Z{Score: exp, Member: z.Member}, z.Member
				}
				if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.ZAdd(ctx, k.Admitted, zs...)
					p.RPush(ctx, k.Unpublished, ids...)
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "admitted/s")
	})
}

// BenchmarkApply1000: one consumer batch of 1,000 registrations of one item
// through Line.Apply (a MULTI/EXEC that starts with SCRIPT LOAD of
// enqueue.lua, then the registrations in enqueue calls of EnqueueBatch),
// against what Apply did before (baseline): the same transaction with one
// enqueue call per registration.
func BenchmarkApply1000(b *testing.B) {
	const n = 1000
	rdb := testenv.Redis(b)
	l := queue.New(rdb)
	ctx := context.Background()
	enqueue := redis.NewScript(queue.EnqueueSrcForTest)
	off := int64(0)
	batch := func(item string) []queue.Op {
		ops := make([]queue.Op, n)
		for i := range ops {
			ops[i] = queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: fmt.Sprintf("t%09d", off), UserID: fmt.Sprintf("u%09d", off), Offset: off}
			off++
		}
		return ops
	}
	b.Run("apply", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := l.Apply(ctx, batch("apply")); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "ops/s")
	})
	b.Run("baseline", func(b *testing.B) {
		k := queue.KeysFor("base")
		keys := []string{k.Applied, k.Users, k.Seq, k.Waiting, k.Admitted, k.Pool, k.Late, k.Drawn, k.Express, k.Bypass, k.Changes}
		for i := 0; i < b.N; i++ {
			ops := batch("base")
			cmds := make([]*redis.Cmd, len(ops))
			if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.ScriptLoad(ctx, queue.EnqueueSrcForTest)
				p.SAdd(ctx, queue.ActiveItems, "base")
				for j, op := range ops {
					// One record as enqueue.lua reads it: partition, 4 fields, fresh,
					// its time, its offset, then its tokenId and place key.
					cmds[j] = enqueue.EvalSha(ctx, p, keys, "0", "4", "1", "0", strconv.FormatInt(op.Offset, 10), op.TokenID, op.UserID)
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			if v, err := cmds[n-1].Slice(); err != nil || len(v) != 1 {
				b.Fatalf("the last enqueue answered %v, %v", v, err)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "ops/s")
	})
}

// reportLua reports the scripts' usec per record (INFO commandstats since
// CONFIG RESETSTAT) and logs where it went: the commands the scripts ran, by
// name, and what is left for Lua itself.
func reportLua(b *testing.B, rdb *redis.Client, before testenv.RedisStats, records int64, unit string) {
	b.Helper()
	s := testenv.ReadRedisStats(b, rdb)
	usec, calls := s.Scripts()
	if records == 0 {
		b.Fatal("no records applied")
	}
	inside := int64(0)
	var parts []string
	for name, u := range s.Usec {
		switch name {
		case "multi", "exec", "script|load", "sadd", "info", "config|resetstat", "lrange":
			continue
		}
		if testenv.IsScriptCmd(name) {
			continue
		}
		inside += u
		parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(u)/float64(records)))
	}
	sort.Strings(parts)
	b.ReportMetric(float64(usec)/float64(records), "lua-µs/"+unit)
	b.ReportMetric(float64(calls)/float64(records), "calls/"+unit)
	b.ReportMetric((s.MainCPU-before.MainCPU)*1e6/float64(records), "cpu-µs/"+unit)
	b.Logf("%d (per %s), %d script calls, %.2f µs/%s in scripts, of which commands %.2f (%s)", records, unit, calls,
		float64(usec)/float64(records), unit, float64(inside)/float64(records), strings.Join(parts, ", "))
}

// registrations returns n register ops of item from offset off on, as the
// consumer makes them: a random 26-character tokenId (rand.Text) that is also
// the place key (an anonymous holder), the record's timestamp set.
func registrations(item string, off int64, n int, at int64) []queue.Op {
	ops := make([]queue.Op, n)
	for i := range ops {
		tok := fmt.Sprintf("%026X", uint64(off)*0x9E3779B97F4A7C15)[:26]
		ops[i] = queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: tok, UserID: tok, Partition: 3, Offset: off, At: at}
		off++
	}
	return ops
}

// BenchmarkLuaPerRegistration: redis-server's script time per registration
// applied, from INFO commandstats (the usec of EVALSHA and EVAL calls, the
// commands they run included, divided by the records): one hot item whose
// line already holds 100,000 people, registrations arriving as the consumer
// applies them (one Line.Apply per fetched batch of a partition; Apply
// sends EnqueueBatch a call). batch=40 is the size the consumer applied
// under wrk's load in bench/ceiling.sh (BENCHMARKS.md), batch=1000 a
// backlog. "new" are all first registrations; "repeat" are registrations
// of proven users who already hold a place (the DUPLICATE answer).
func BenchmarkLuaPerRegistration(b *testing.B) {
	const line = 100_000
	srv := testenv.StartRedis(b)
	rdb := srv.Client()
	l := queue.New(rdb)
	ctx := context.Background()
	at := time.Now().UnixMilli()
	off := int64(0)
	for off < line {
		if _, err := l.Apply(ctx, registrations("hot", off, 1000, at)); err != nil {
			b.Fatal(err)
		}
		off += 1000
	}
	for _, kind := range []string{"new", "repeat"} {
		for _, batch := range []int{40, 1000} {
			b.Run(fmt.Sprintf("%s/batch=%d", kind, batch), func(b *testing.B) {
				if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				before := testenv.ReadRedisStats(b, rdb)
				want, records := queue.Added, int64(0)
				for b.Loop() {
					ops := registrations("hot", off, batch, at)
					if kind == "repeat" { // the users of offsets 0.. hold their places
						want = queue.Duplicate
						for i := range ops {
							ops[i].UserID = registrations("hot", int64(i), 1, at)[0].UserID
						}
					}
					res, err := l.Apply(ctx, ops)
					if err != nil {
						b.Fatal(err)
					}
					if res[batch-1].Outcome != want {
						b.Fatalf("the batch's last registration: %+v", res[batch-1])
					}
					off += int64(batch)
					records += int64(batch)
				}
				reportLua(b, rdb, before, records, "record")
			})
		}
	}
}

// BenchmarkLuaPerAdmission: redis-server's script time per person admitted
// in a tick (promote.lua and ack.lua, as the scheduler runs them: PromoteMany
// then AckPublished), from INFO commandstats: one hot item whose line holds
// 200,000 people registered through Apply, admitting 5,000/s in ticks of
// 200 ms (1,000 a tick; the first tick 5,000, the bucket's burst) with
// sessions of 10 s, so after the first 50 ticks each tick also expires about
// as many admissions as it makes. Run it with -benchtime 150x (the line
// lasts about 195 ticks).
func BenchmarkLuaPerAdmission(b *testing.B) {
	const line, batch = 200_000, 1000
	srv := testenv.StartRedis(b)
	rdb := srv.Client()
	l := queue.New(rdb)
	ctx := context.Background()
	if _, err := l.ApplyItem(ctx, topics.ItemState{ItemID: "hot", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 5000, SessionTTLSeconds: 10}}); err != nil {
		b.Fatal(err)
	}
	at := time.Now().UnixMilli()
	for off := int64(0); off < line; off += batch {
		if _, err := l.Apply(ctx, registrations("hot", off, batch, at)); err != nil {
			b.Fatal(err)
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	before := testenv.ReadRedisStats(b, rdb)
	now := time.UnixMilli(at)
	admitted := int64(0)
	for b.Loop() {
		now = now.Add(200 * time.Millisecond)
		ticks, errs, err := l.PromoteMany(ctx, []string{"hot"}, 1, now, time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if errs[0] != nil {
			b.Fatal(errs[0])
		}
		if ticks[0].Waiting == 0 {
			b.Fatal("line ran dry: lower -benchtime")
		}
		if err := l.AckPublished(ctx, 1, []string{"hot"}, []int{len(ticks[0].Unpublished)}); err != nil {
			b.Fatal(err)
		}
		admitted += int64(ticks[0].Admitted)
	}
	reportLua(b, rdb, before, admitted, "admitted")
}
