package view_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"go.uber.org/zap"
)

// TestWatcherFindsEachItemsLoss: with the view's marker in place, an item
// whose own marker vanished (its node restarted empty), carries another
// token, or whose seq or head went backwards (a replica behind took over,
// behind by registrations or by admissions only) is lost, and only it; an
// item never registered is not.
func TestWatcherFindsEachItemsLoss(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	if err := view.SetReady(ctx, rdb, "g1", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, it := range []string{"a", "b", "c", "d", "e"} {
		if err := view.Register(ctx, rdb, it, "g1"); err != nil {
			t.Fatal(err)
		}
	}
	rdb.Set(ctx, queue.KeysFor("c").Seq, 10, 0)
	rdb.Set(ctx, queue.KeysFor("e").Seq, 10, 0)
	rdb.Set(ctx, queue.KeysFor("e").Head, 6, 0)
	w := view.NewWatcher(rdb, view.Options{}, nil, zap.NewNop())
	if st := w.Check(ctx); !st.Trusted || len(st.Lost) != 0 || len(st.Registry) != 5 {
		t.Fatalf("healthy: %+v", st)
	}
	for _, it := range []string{"a", "never"} {
		if err := w.ConfirmItem(ctx, it); err != nil {
			t.Fatalf("confirm %s: %v", it, err)
		}
	}
	rdb.Del(ctx, view.ItemKey("a"))             // a's node restarted empty
	rdb.Set(ctx, view.ItemKey("b"), "g0", 0)    // b's node holds an older incarnation
	rdb.Set(ctx, queue.KeysFor("c").Seq, 7, 0)  // c's node rolled back
	rdb.Set(ctx, queue.KeysFor("e").Head, 4, 0) // e's node missed two admissions, no registration
	if err := w.ConfirmItem(ctx, "a"); !errors.Is(err, view.ErrNotTrusted) {
		t.Fatalf("confirm a after its loss = %v, want ErrNotTrusted", err)
	}
	st := w.Check(ctx)
	if !st.Trusted {
		t.Fatalf("the view itself stopped being trusted: %+v", st)
	}
	for _, it := range []string{"a", "b", "c", "e"} {
		if ok, why := w.Item(it); ok || why == "" {
			t.Errorf("item %s trusted after its loss", it)
		}
		if st.Lost[it].State != view.ItemLost || st.Lost[it].Since == 0 {
			t.Errorf("item %s: %+v", it, st.Lost[it])
		}
	}
	for _, it := range []string{"d", "never"} {
		if ok, why := w.Item(it); !ok {
			t.Errorf("item %s not trusted: %s", it, why)
		}
	}
	if got := w.Usable([]string{"a", "b", "c", "d", "e", "never"}); len(got) != 2 || got[0] != "d" {
		t.Errorf("usable = %v, want [d never]", got)
	}
	// A second watcher (another service) finds the same losses, with the
	// first finder's time.
	w2 := view.NewWatcher(rdb, view.Options{}, nil, zap.NewNop())
	if st2 := w2.Check(ctx); len(st2.Lost) != 4 || st2.Lost["a"].Since != st.Lost["a"].Since {
		t.Fatalf("second watcher: %+v, want the same four with the same since", st2.Lost)
	}
	if r := w.Rebuilding(); len(r) != 4 || r[0].State != view.ItemLost {
		t.Fatalf("rebuilding = %+v", r)
	}
	// Registering again never fakes a lost item's marker.
	if err := view.Register(ctx, rdb, "a", "g1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, view.ItemKey("a")).Result(); n != 0 {
		t.Fatal("Register wrote the marker of a lost item")
	}
	if err := view.Found(ctx, rdb, "c"); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, view.ItemKey("c"), "g2", 0)
	rdb.HSet(ctx, view.RegistryKey, "c", "g2")
	if st := w.Check(ctx); len(st.Lost) != 3 {
		t.Fatalf("after c was rebuilt (new token, lower seq is its new start): lost %v", st.Lost)
	}
}

// With more items than ItemsPerCheck, each check reads the next ones: every
// item's loss is found within ceil(items/ItemsPerCheck) checks.
func TestWatcherChecksItemsInTurns(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	if err := view.SetReady(ctx, rdb, "g1", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	ids := []string{"i0", "i1", "i2", "i3", "i4", "i5", "i6"}
	for _, it := range ids {
		if err := view.Register(ctx, rdb, it, "g1"); err != nil {
			t.Fatal(err)
		}
		rdb.Del(ctx, view.ItemKey(it)) // all lost
	}
	w := view.NewWatcher(rdb, view.Options{ItemsPerCheck: 3}, nil, zap.NewNop())
	for i, want := range []int{3, 6, 7} {
		if st := w.Check(ctx); len(st.Lost) != want {
			t.Fatalf("check %d: %d lost, want %d", i+1, len(st.Lost), want)
		}
	}
}

// Missing finds an item lost since the last check (and marks it lost), so a
// writer does not write its line afresh before the next check.
func TestMissingFindsALossBeforeTheNextCheck(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	if err := view.SetReady(ctx, rdb, "g1", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, it := range []string{"a", "b"} {
		if err := view.Register(ctx, rdb, it, "g1"); err != nil {
			t.Fatal(err)
		}
	}
	w := view.NewWatcher(rdb, view.Options{}, nil, zap.NewNop())
	w.Check(ctx)
	rdb.Del(ctx, view.ItemKey("a"))
	if ok, _ := w.Item("a"); !ok {
		t.Fatal("the watcher knew before its check: the test proves nothing")
	}
	got, err := w.Missing(ctx, []string{"a", "b", "never"})
	if err != nil || len(got) != 1 || got[0] != "a" {
		t.Fatalf("missing = %v, %v; want [a]", got, err)
	}
	lost, _, err := view.Lost(ctx, rdb, "a", "b")
	if err != nil || len(lost) != 1 || lost["a"].State != view.ItemLost {
		t.Fatalf("lost = %v, %v; want a lost", lost, err)
	}
}
