package view_test

import (
	"context"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"go.uber.org/zap"
)

// A full Redis (maxmemory below the memory in use, the nemesis's redis-oom)
// still takes the marker's advance past records already on Kafka: refused,
// the marker stayed behind the record, every watcher then took the view for
// a rolled-back Redis and the consumers rebuilt it from the whole record, 40 s
// with nobody admitted in the seeded 12-minute run (RELIABILITY.md), for a
// memory spike of 3-6 s. The writes the view itself makes are refused as
// before (the line's scripts declare no flags).
func TestAFullRedisStillTakesTheMarkersAdvance(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	rdb := srv.Client()
	if err := view.SetReady(ctx, rdb, "g", map[string]int64{view.Field("t", 0): 3}, time.Now()); err != nil {
		t.Fatal(err)
	}
	rec := fixedRecord{view.Field("t", 0): 7}
	w := view.NewWatcher(rdb, view.Options{Record: rec}, nil, zap.NewNop())
	if s := w.Check(ctx); s.Trusted {
		t.Fatalf("a marker behind the record was trusted: %+v (the check this test relies on)", s)
	}

	lift := srv.Fill()
	if err := rdb.Set(ctx, "grow", "x", 0).Err(); err == nil {
		t.Fatal("a write that grows memory went through: Redis is not full")
	}

	if n, err := view.Advance(ctx, rdb, "t", 0, 7).Int(); err != nil || n != 1 {
		t.Fatalf("advance on a full Redis: %d, %v; want it moved", n, err)
	}
	lift()
	if s := w.Check(ctx); !s.Trusted {
		t.Fatalf("the view after the advance: %+v, want trusted", s)
	}
}
