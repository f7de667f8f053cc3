package rebuild_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
	"github.com/waitroom/waitroom/pkg/redisview/snapshot"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// snapWriter is a snapshot writer producing to w's cluster.
func (w *world) snapWriter() *snapshot.Writer {
	kc, err := kgo.NewClient(append(w.base, kgo.RequiredAcks(kgo.AllISRAcks()))...)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(kc.Close)
	return snapshot.NewWriter(w.rdb, kc, zap.NewNop())
}

func (w *world) rebuildWith(o rebuild.Options) rebuild.Report {
	w.t.Helper()
	w.rdb.FlushAll(w.ctx)
	o.Settle = time.Millisecond
	rep, err := rebuild.New(w.rdb, w.base, zap.NewNop()).Run(w.ctx, o)
	if err != nil {
		w.t.Fatal(err)
	}
	return rep
}

// TestRebuildFromSnapshotAndTailIsExact: lines with waiting, admitted,
// expired, left, completed and bypass places are snapshotted mid-history;
// more records (and admissions) follow; a rebuild that loads the snapshots
// and replays only the tail puts back every key a full replay does, reads
// fewer records, and a snapshot whose chunk is gone is not used.
func TestRebuildFromSnapshotAndTailIsExact(t *testing.T) {
	w := newWorld(t)
	w.item("a", 3, 60)
	w.item("b", 2, 1)
	w.item("quiet", 1, 60)
	now := time.Now()
	for i := range 20 {
		w.reg(topics.KindRegister, "a", "u"+strconv.Itoa(i), "ta"+strconv.Itoa(i))
		w.reg(topics.KindRegister, "b", "u"+strconv.Itoa(i), "tb"+strconv.Itoa(i))
	}
	w.promote("a", 5, now.Add(-3*time.Second))
	w.promote("b", 5, now.Add(-3*time.Second))
	w.reg(topics.KindLeave, "a", "u0", "ta0")
	w.reg(topics.KindComplete, "a", "u1", "ta1")
	w.reg(topics.KindLeave, "a", "u10", "ta10")
	w.regBypass("a", "s1", "ts1", "code-a", 2, now.Add(time.Hour))

	sw := w.snapWriter()
	for _, it := range []string{"a", "b", "quiet"} {
		if _, err := sw.Write(w.ctx, it); err != nil {
			t.Fatalf("snapshot %s: %v", it, err)
		}
	}
	// The tail: an admission decided at the snapshot's offsets, records after.
	w.promote("a", 5, now.Add(-2*time.Second))
	w.promote("b", 5, now.Add(-2*time.Second))
	w.reg(topics.KindRegister, "a", "u10", "ta10-2")
	w.reg(topics.KindLeave, "a", "u3", "ta3")
	w.reg(topics.KindRegister, "b", "u0", "tb0-2")
	w.regBypass("a", "s2", "ts2", "code-a", 2, now.Add(time.Hour))
	w.regBypass("a", "s3", "ts3", "code-a", 2, now.Add(time.Hour)) // exhausted: counted in the snapshot's uses
	w.promote("a", 5, now.Add(-1*time.Second))
	w.reg(topics.KindRegister, "a", "late", "ta-late")

	items := []string{"a", "b", "quiet"}
	before := w.snapshot(items...)
	full := w.rebuildWith(rebuild.Options{FullReplay: true})
	diff(t, before, w.snapshot(items...))
	snap := w.rebuildWith(rebuild.Options{})
	diff(t, before, w.snapshot(items...))
	if snap.Snapshots != 3 || full.Snapshots != 0 {
		t.Errorf("lines loaded from snapshots: %d (full replay %d), want 3 (0)", snap.Snapshots, full.Snapshots)
	}
	if snap.Records >= full.Records {
		t.Errorf("the rebuild from snapshots read %d records, the full replay %d: the snapshots saved nothing", snap.Records, full.Records)
	}
	t.Logf("full replay: %d records; from snapshots: %d records", full.Records, snap.Records)

	// A torn snapshot (a chunk deleted) is not used: b is replayed whole.
	kc, err := kgo.NewClient(w.base...)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	h, err := sw.Write(w.ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.ProduceSync(w.ctx, &kgo.Record{Topic: topics.Snapshots, Key: []byte(topics.SnapshotChunkKey("b", h.Gen, 0))}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	torn := w.rebuildWith(rebuild.Options{})
	diff(t, before, w.snapshot(items...))
	if len(torn.Torn) != 1 || torn.Torn[0] != "b" || torn.Snapshots != 2 {
		t.Errorf("with b's snapshot torn: torn %v, %d loaded; want [b] and 2", torn.Torn, torn.Snapshots)
	}
}

// A line is not snapshotted while what Redis holds is not the record's (the
// view or the item rebuilding or lost) nor mid-change (admissions not yet
// published), and is once that is over.
func TestSnapshotRefusedWhileUntrustedOrMidChange(t *testing.T) {
	w := newWorld(t)
	w.item("x", 5, 60)
	for i := range 5 {
		w.reg(topics.KindRegister, "x", "u"+strconv.Itoa(i), "tx"+strconv.Itoa(i))
	}
	sw := w.snapWriter()
	if _, err := sw.Write(w.ctx, "x"); err != nil {
		t.Fatalf("a ready line: %v", err)
	}
	if err := view.SetRebuilding(w.ctx, w.rdb, "g1", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Write(w.ctx, "x"); !errors.Is(err, snapshot.ErrNotTrusted) {
		t.Fatalf("while the view rebuilds: %v, want ErrNotTrusted", err)
	}
	if err := view.SetReady(w.ctx, w.rdb, "g2", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := view.SetLost(w.ctx, w.rdb, "x", view.LostItem{Since: 1, State: view.ItemLost}); err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Write(w.ctx, "x"); !errors.Is(err, snapshot.ErrNotTrusted) {
		t.Fatalf("while the item is lost: %v, want ErrNotTrusted", err)
	}
	if err := view.Found(w.ctx, w.rdb, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.line.Promote(w.ctx, "x", 1, time.Now(), time.Second); err != nil { // not published yet
		t.Fatal(err)
	}
	if _, err := sw.Write(w.ctx, "x"); !errors.Is(err, queue.ErrBusy) {
		t.Fatalf("with admissions not yet published: %v, want queue.ErrBusy", err)
	}
	if err := w.line.AckPublished(w.ctx, 1, []string{"x"}, []int{5}); err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Write(w.ctx, "x"); err != nil {
		t.Fatalf("once published: %v", err)
	}
}
