package view_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"go.uber.org/zap"
)

type fixedRecord map[string]int64

func (f fixedRecord) Floor(context.Context) (map[string]int64, error) { return f, nil }

func TestWatcherVerdicts(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	rec := fixedRecord{}
	w := view.NewWatcher(rdb, view.Options{Record: rec}, nil, zap.NewNop())
	if ok, _ := w.Trusted(); ok {
		t.Fatal("trusted before the first check")
	}
	if s := w.Check(ctx); s.Trusted || s.Cause != "empty" {
		t.Fatalf("empty Redis: %+v, want not trusted (empty)", s)
	}
	// Advance never fakes a marker in an empty view.
	if n, err := view.Advance(ctx, rdb, "t", 0, 5).Int(); err != nil || n != 0 {
		t.Fatalf("advance without marker = %d, %v; want 0", n, err)
	}
	if err := view.SetRebuilding(ctx, rdb, "g1", "test"); err != nil {
		t.Fatal(err)
	}
	if s := w.Check(ctx); s.Trusted || s.Cause != "rebuilding" {
		t.Fatalf("rebuilding: %+v", s)
	}
	if err := view.SetReady(ctx, rdb, "g1", map[string]int64{"t/0": 10}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if s := w.Check(ctx); !s.Trusted || s.Gen != "g1" {
		t.Fatalf("ready: %+v", s)
	}
	if err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// The record moves past what the view applied: older than the record.
	rec["t/0"] = 12
	if s := w.Check(ctx); s.Trusted || s.Cause != "behind" {
		t.Fatalf("behind: %+v", s)
	}
	if n, err := view.Advance(ctx, rdb, "t", 0, 12).Int(); err != nil || n != 1 {
		t.Fatalf("advance = %d, %v", n, err)
	}
	if n, _ := view.Advance(ctx, rdb, "t", 0, 11).Int(); n != 0 {
		t.Fatal("advance moved backwards")
	}
	if s := w.Check(ctx); !s.Trusted {
		t.Fatalf("caught up: %+v", s)
	}
	// A Redis restored from an older snapshot of the same generation has
	// fewer writes than the watcher saw: rolled back, and reads are refused.
	if err := w.Confirm(ctx); err != nil {
		t.Fatalf("confirm of the current view: %v", err)
	}
	rdb.HIncrBy(ctx, view.MarkerKey, "writes", -1)
	if err := w.Confirm(ctx); err == nil {
		t.Fatal("a read of a rolled-back view was confirmed")
	}
	if s := w.Check(ctx); s.Trusted || s.Cause != "behind" {
		t.Fatalf("rolled back: %+v", s)
	}
	// ... and says so in the marker, so a service that never saw the higher
	// count (the consumer, which rebuilds) distrusts it too.
	other := view.NewWatcher(rdb, view.Options{}, nil, zap.NewNop())
	if s := other.Check(ctx); s.Trusted || s.Cause != "rebuilding" {
		t.Fatalf("another service after the rollback was seen: %+v, want not trusted", s)
	}
	// A wipe is noticed by the next check; Wait returns once a rebuild is done.
	rdb.FlushAll(ctx)
	if s := w.Check(ctx); s.Trusted {
		t.Fatal("trusted after FLUSHALL")
	}
	done := make(chan error, 1)
	go func() { done <- w.Wait(ctx) }()
	select {
	case <-done:
		t.Fatal("Wait returned while not trusted")
	case <-time.After(50 * time.Millisecond):
	}
	if err := view.SetReady(ctx, rdb, "g2", map[string]int64{"t/0": 12}, time.Now()); err != nil {
		t.Fatal(err)
	}
	w.Check(ctx)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A view that keeps growing while it is read is never taken for a rolled-back
// one: checks race writers (Touch, as every service does before a write) and
// readers (Confirm, as every answer does after a read), which raise the count
// the watcher remembers between its own read and its verdict.
func TestWatcherNeverDistrustsAGrowingView(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	if err := view.SetReady(ctx, rdb, "g1", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	w := view.NewWatcher(rdb, view.Options{}, nil, zap.NewNop())
	if s := w.Check(ctx); !s.Trusted {
		t.Fatalf("ready view: %+v", s)
	}
	const writes, checks = 3000, 3000
	stop := make(chan struct{})
	errs := make(chan error, 4)
	go func() {
		defer close(stop)
		for range writes {
			if err := view.Touch(ctx, rdb); err != nil {
				errs <- err
				return
			}
		}
	}()
	for range 2 {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if err := w.Confirm(ctx); err != nil {
					errs <- fmt.Errorf("confirm of a growing view: %w (%+v)", err, w.Status())
					return
				}
			}
		}()
	}
	for i := 0; i < checks; i++ {
		if s := w.Check(ctx); !s.Trusted {
			t.Fatalf("check %d: a growing view distrusted: %+v", i, s)
		}
	}
	<-stop
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
