package rebuild_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// promoteOld runs one tick and publishes it as a scheduler did before
// admission events carried the applied offsets (nor, with noExp, expiries).
func (w *world) promoteOld(item string, epoch int64, now time.Time, noExp bool) {
	w.t.Helper()
	tk, err := w.line.Promote(w.ctx, item, epoch, now, time.Second)
	if err != nil {
		w.t.Fatal(err)
	}
	if len(tk.Unpublished) == 0 {
		w.t.Fatal("nobody admitted: the scenario proves nothing")
	}
	ev := topics.AdmissionEvent{V: 1, ItemID: item, Admitted: tk.Unpublished, Head: tk.Head, Epoch: epoch, At: now.UnixMilli()}
	if !noExp {
		for _, a := range tk.Admits {
			ev.ExpiresAt = append(ev.ExpiresAt, a.ExpiresAt)
		}
	}
	w.produce(topics.Admissions, item, &ev)
	if err := w.line.AckPublished(w.ctx, epoch, []string{item}, []int{len(tk.Unpublished)}); err != nil {
		w.t.Fatal(err)
	}
}

// An admission is replayed exactly where it was decided among the item's
// registrations: a user whose admission had expired by the time of their next
// registration gets a new place, as live (applied before that registration,
// the old token would not be waiting; applied at the end, the new one would be
// a duplicate of the old one still waiting). Someone who registered after a
// tick waits for the next one.
func TestRebuildAppliesEachAdmissionAtItsOffset(t *testing.T) {
	w := newWorld(t)
	w.item("m", 1, 1) // one a tick, admissions of 1 s
	w.reg(topics.KindRegister, "m", "u1", "t1")
	w.promote("m", 2, time.Now().Add(-10*time.Second)) // t1 admitted, expired long ago
	w.reg(topics.KindRegister, "m", "u2", "t2")
	w.reg(topics.KindRegister, "m", "u1", "t1-again") // a new place: the admission had expired
	w.promote("m", 2, time.Now().Add(-5*time.Second)) // t2 admitted, expired
	w.reg(topics.KindRegister, "m", "u3", "t3")
	w.promote("m", 2, time.Now()) // t1-again admitted, live
	users := w.rdb.HGetAll(w.ctx, queue.KeysFor("m").Users).Val()
	if users["u1"] != "t1-again" {
		t.Fatalf("live: u1 holds %q, want t1-again", users["u1"])
	}
	if got := w.rdb.ZRange(w.ctx, queue.KeysFor("m").Waiting, 0, -1).Val(); len(got) != 1 || got[0] != "t3" {
		t.Fatalf("live line %v, want [t3]", got)
	}
	before := w.snapshot("m")
	w.rebuildFromScratch()
	diff(t, before, w.snapshot("m"))
}

// Admission events written before they carried the applied offsets are
// replayed by time: before the first registration of the item stamped after
// the event (and, without expiries, for the session TTL from the event's time).
func TestRebuildPlacesOldAdmissionEventsByTime(t *testing.T) {
	for _, noExp := range []bool{false, true} {
		t.Run("without expiries="+strconv.FormatBool(noExp), func(t *testing.T) {
			w := newWorld(t)
			w.item("o", 1, 1)
			w.reg(topics.KindRegister, "o", "u1", "t1")
			w.reg(topics.KindRegister, "o", "u2", "t2")
			time.Sleep(5 * time.Millisecond)
			w.promoteOld("o", 2, time.Now(), noExp) // t1, for a second
			time.Sleep(1100 * time.Millisecond)
			w.reg(topics.KindRegister, "o", "u1", "t1-again") // expired by now: a new place
			w.reg(topics.KindRegister, "o", "u3", "t3")
			if got := w.rdb.ZRange(w.ctx, queue.KeysFor("o").Waiting, 0, -1).Val(); len(got) != 3 || got[1] != "t1-again" {
				t.Fatalf("live line %v, want [t2 t1-again t3]", got)
			}
			before := w.snapshot("o")
			w.rebuildFromScratch()
			diff(t, before, w.snapshot("o"))
		})
	}
}

// A draw places a pre-queue, then ticks admit from the drawn order while
// more people register: the rebuild replays the draw through the draw
// scripts and each admission after it, at its offset.
func TestRebuildReplaysADrawThenAdmissions(t *testing.T) {
	w := newWorld(t)
	w.item("d", 4, 60)
	root := draw.Root([]byte("k"), "d", "x")
	commit := draw.Commit(root, 3)
	seed1, _ := draw.Seed(root, 3, 1)
	const w1 = int64(1000)
	for i := range 12 {
		w.pooled("d", "u"+strconv.Itoa(i), "t"+strconv.Itoa(i), w1)
	}
	w.draw("d", w1, 1, seed1, commit)
	now := time.Now()
	w.promote("d", 2, now.Add(-2*time.Second)) // 4 of the drawn order
	w.reg(topics.KindRegister, "d", "a1", "ta1")
	w.reg(topics.KindLeave, "d", "u3", "t3")
	w.promote("d", 2, now.Add(-time.Second)) // 4 more
	w.reg(topics.KindRegister, "d", "a2", "ta2")
	if n := w.rdb.ZCard(w.ctx, queue.KeysFor("d").Admitted).Val(); n < 7 {
		t.Fatalf("live: %d admitted, want the two ticks' 7 or 8", n)
	}
	before := w.snapshot("d")
	w.rebuildFromScratch()
	diff(t, before, w.snapshot("d"))
}
