package queue_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/queue"
	"github.com/waitroom/waitroom/pkg/testenv"
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
		keys := []string{k.Applied, k.Users, k.Seq, k.Waiting, k.Admitted, k.Pool, k.Late, k.Drawn, k.Express, k.Bypass}
		for i := 0; i < b.N; i++ {
			ops := batch("base")
			cmds := make([]*redis.Cmd, len(ops))
			if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.ScriptLoad(ctx, queue.EnqueueSrcForTest)
				p.SAdd(ctx, queue.ActiveItems, "base")
				for j, op := range ops {
					cmds[j] = enqueue.EvalSha(ctx, p, keys, "0", strconv.FormatInt(op.Offset, 10), op.TokenID, op.UserID, "0", "", "0")
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
