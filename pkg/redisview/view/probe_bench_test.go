package view

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// BenchmarkProbe2000Items is one check's probe of the default ItemsPerCheck
// items, each with a marker, a seq, a head and a count of changes: the cost
// a watcher pays every interval (WR_VIEW_CHECK_INTERVAL) per 2000 items.
// Reports items/s and the redis-server CPU per item (INFO's used_cpu_sys +
// used_cpu_user, which on a cluster is that of the node the client talks to
// first: run it on one server).
func BenchmarkProbe2000Items(b *testing.B) {
	const n = 2000
	ctx := context.Background()
	rdb := testenv.Redis(b)
	ids := make([]string, n)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range ids {
			ids[i] = "p" + strconv.Itoa(i)
			k := queue.KeysFor(ids[i])
			p.Set(ctx, ItemKey(ids[i]), "g1", 0)
			p.Set(ctx, k.Seq, 1000+i, 0)
			p.Set(ctx, k.Head, i, 0)
			p.Set(ctx, k.Changes, 2000+i, 0)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	cpu0 := serverCPU(b, rdb)
	b.ResetTimer()
	for range b.N {
		if got := probeItems(ctx, rdb, ids); len(got) != n {
			b.Fatalf("probed %d items, want %d", len(got), n)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "items/s")
	b.ReportMetric((serverCPU(b, rdb)-cpu0)*1e6/float64(n*b.N), "server-µs/item")
}

// serverCPU is redis-server's CPU time so far (s).
func serverCPU(b *testing.B, rdb redis.UniversalClient) float64 {
	b.Helper()
	info, err := rdb.InfoMap(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, sec := range info {
		for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
			v, _ := strconv.ParseFloat(sec[f], 64)
			total += v
		}
		break // one node's
	}
	return total
}
