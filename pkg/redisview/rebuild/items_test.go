package rebuild_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/redisview/linesnap"
	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// TestRebuildItemsRestoresOnlyTheLostItem loses one item's keys (its node
// restarted empty, while the view's marker lived on) and rebuilds only it:
// its line comes back exactly, the other item and the view's marker are not
// touched, and, nothing having been skipped meanwhile, it is trusted again.
func TestRebuildItemsRestoresOnlyTheLostItem(t *testing.T) {
	w := newWorld(t)
	w.item("lost", 4, 60)
	w.item("kept", 4, 60)
	for i := range 20 {
		w.reg(topics.KindRegister, "lost", "u"+strconv.Itoa(i), "tl"+strconv.Itoa(i))
		w.reg(topics.KindRegister, "kept", "u"+strconv.Itoa(i), "tk"+strconv.Itoa(i))
	}
	w.promote("lost", 3, time.Now().Add(-time.Second))
	rb := rebuild.New(w.rdb, w.base, zap.NewNop())
	full, err := rb.Run(w.ctx, rebuild.Options{Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reg, _, err := view.ReadItems(w.ctx, w.rdb)
	if err != nil || reg["lost"] != full.Gen || reg["kept"] != full.Gen {
		t.Fatalf("registry after a full rebuild = %v, %v; want both items at %s", reg, err, full.Gen)
	}
	at := time.Now()
	take := func(item string) *linesnap.Snapshot {
		s, err := linesnap.Take(w.ctx, w.rdb, item, at)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := map[string]*linesnap.Snapshot{"lost": take("lost"), "kept": take("kept")}
	if len(before["lost"].Entries) != 20 {
		t.Fatalf("lost has %d entries before, want 20", len(before["lost"].Entries))
	}
	// The node of "lost" restarts empty: every key in its slot goes.
	k := queue.KeysFor("lost")
	if err := w.rdb.Del(w.ctx, k.Seq, k.Waiting, k.Admitted, k.Users, k.Head, k.State, k.Applied, k.Epoch, k.Pace, view.ItemKey("lost")).Err(); err != nil {
		t.Fatal(err)
	}
	wt := view.NewWatcher(w.rdb, view.Options{}, nil, zap.NewNop())
	st := wt.Check(w.ctx)
	if !st.Trusted || len(st.Lost) != 1 || st.Lost["lost"].State != view.ItemLost {
		t.Fatalf("after the loss: %+v; want the view trusted and only item lost lost", st)
	}
	if ok, _ := wt.Item("kept"); !ok {
		t.Fatal("kept not trusted")
	}
	marker, _, _ := view.Read(w.ctx, w.rdb)
	rep, err := rb.Run(w.ctx, rebuild.Options{Items: []string{"lost"}, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Items != 1 || rep.Waiting+rep.Admitted != 20 || rep.Admitted == 0 {
		t.Fatalf("report %+v, want 1 item of 20 places, some admitted", rep)
	}
	for item, b := range before {
		if d := linesnap.Diff(b, take(item)); len(d) > 0 {
			t.Errorf("%s after the item's rebuild differs from before:\n%v", item, d)
		}
	}
	after, _, _ := view.Read(w.ctx, w.rdb)
	if after.Gen != marker.Gen || after.State != view.Ready {
		t.Fatalf("the view's marker changed: %+v, was %+v", after, marker)
	}
	st = wt.Check(w.ctx)
	if len(st.Lost) != 0 || st.Registry["lost"] != rep.Gen || st.Registry["kept"] != full.Gen {
		t.Fatalf("after the rebuild: lost %v, registry %v; want none lost, lost at %s", st.Lost, st.Registry, rep.Gen)
	}
}

// TestRebuildItemsLeavesASkippedItemToTheConsumer: a record of the lost item
// the consumer passed over after the rebuild's end keeps the item lost
// (rebuilt, with the ends), for the consumer to apply again first.
func TestRebuildItemsLeavesASkippedItemToTheConsumer(t *testing.T) {
	w := newWorld(t)
	w.item("lost", 4, 60)
	w.reg(topics.KindRegister, "lost", "u1", "t1")
	rb := rebuild.New(w.rdb, w.base, zap.NewNop())
	if _, err := rb.Run(w.ctx, rebuild.Options{Settle: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := view.MarkLost(w.ctx, w.rdb, "lost", "test", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := view.Skipped(w.ctx, w.rdb, "lost", 0, 1<<40); err != nil { // beyond any end
		t.Fatal(err)
	}
	if _, err := rb.Run(w.ctx, rebuild.Options{Items: []string{"lost"}, Settle: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	lost, skipped, err := view.Lost(w.ctx, w.rdb, "lost")
	if err != nil {
		t.Fatal(err)
	}
	if li := lost["lost"]; li.State != view.ItemRebuilt || len(li.Ends) == 0 || li.Since == 0 {
		t.Fatalf("entry %+v, want rebuilt with the ends", li)
	}
	if skipped["lost"].Offset != 1<<40 {
		t.Fatalf("skipped %v", skipped)
	}
}

// A per-item rebuild writes on the lost item how many records it replays
// and how many are left while it replays (/readyz and the console show
// them), from the end offsets read at its start.
func TestRebuildItemsShowsRecordsLeft(t *testing.T) {
	w := newWorld(t)
	w.item("big", 4, 60)
	const n = 20_000
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topics.Registrations, Key: []byte("big"), Value: topics.Encode(&topics.RegistrationEvent{V: 1,
			Kind: topics.KindRegister, ItemID: "big", UserID: "u" + strconv.Itoa(i), TokenID: "t" + strconv.Itoa(i), RequestedAt: 1})}
	}
	if err := w.kc.ProduceSync(w.ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	seen := map[[2]int64]bool{} // (records, left) pairs read while it rebuilt
	done := make(chan error, 1)
	go func() {
		_, err := rebuild.New(w.rdb, w.base, zap.NewNop()).Run(w.ctx, rebuild.Options{Settle: time.Millisecond, Items: []string{"big"},
			Progress: time.Millisecond, FullReplay: true})
		done <- err
	}()
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		case <-time.After(time.Millisecond):
			lost, _, err := view.Lost(w.ctx, w.rdb, "big")
			if err != nil {
				t.Fatal(err)
			}
			if li, ok := lost["big"]; ok && li.State == view.ItemRebuilding && li.Records > 0 {
				seen[[2]int64{li.Records, li.Left}] = true
			}
		}
	}
	want := int64(n + 1) // the registrations and the item's record
	mid := false
	for p := range seen {
		if p[0] != want {
			t.Errorf("records to replay shown as %d, want %d (the end offsets at the start)", p[0], want)
		}
		if p[1] > 0 && p[1] < p[0] {
			mid = true
		}
	}
	if !mid {
		t.Errorf("no count of records left between the start and the end was shown: %v", seen)
	}
	t.Logf("%d distinct (records, left) shown while rebuilding", len(seen))
}
