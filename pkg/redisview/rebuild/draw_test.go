package rebuild_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// pooled registers user with a draw window, as the API stamps one.
func (w *world) pooled(item, user, tok string, window int64) {
	w.t.Helper()
	ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, ItemID: item, UserID: user, TokenID: tok, RequestedAt: time.Now().UnixMilli(), Window: window}
	r := w.produce(topics.Registrations, item, &ev)
	if _, err := w.line.Apply(w.ctx, []queue.Op{{Kind: queue.OpRegister, ItemID: item, TokenID: tok, UserID: user, Partition: r.Partition, Offset: r.Offset, Window: window}}); err != nil {
		w.t.Fatal(err)
	}
}

// draw publishes a draw record and applies it as the consumer does.
func (w *world) draw(item string, window, round int64, seed, commit string) {
	w.t.Helper()
	ev := topics.RegistrationEvent{V: 1, Kind: topics.KindDraw, ItemID: item, RequestedAt: time.Now().UnixMilli(),
		Draw: &topics.Draw{Window: window, Round: round, Seed: seed, Commit: commit}}
	r := w.produce(topics.Registrations, item, &ev)
	if _, err := w.line.Draw(w.ctx, queue.DrawOp{ItemID: item, Partition: r.Partition, Offset: r.Offset, Window: window, Round: round, Seed: seed, Commit: commit}); err != nil {
		w.t.Fatal(err)
	}
}

// A pre-queue drawn (with leaves from the pool and the late ones, a repeat
// draw of the window), registrations after it, a random-mode window pooled
// and not drawn yet with one queued late behind it: the rebuilt view has the
// same waiting order, pool, late set and last draw as the live one.
func TestRebuildReproducesADraw(t *testing.T) {
	w := newWorld(t)
	w.item("s", 0, 60)
	root := draw.Root([]byte("k"), "s", "x")
	commit := draw.Commit(root, 3)
	seed1, _ := draw.Seed(root, 3, 1)
	const w1, w2 = int64(1000), int64(2000)
	for i := range 300 {
		w.pooled("s", "u"+strconv.Itoa(i), "t"+strconv.Itoa(i), w1)
	}
	w.reg(topics.KindLeave, "s", "u7", "t7")
	w.reg(topics.KindRegister, "s", "l1", "tl1")
	w.reg(topics.KindRegister, "s", "l2", "tl2")
	w.reg(topics.KindLeave, "s", "l1", "tl1")
	w.pooled("s", "u8", "t8-again", w1) // a duplicate of a pooled user
	w.draw("s", w1, 1, seed1, commit)
	w.draw("s", w1, 1, seed1, commit) // a second scheduler's copy
	w.reg(topics.KindRegister, "s", "a1", "ta1")
	w.pooled("s", "r1", "tr1", w2)
	w.pooled("s", "r2", "tr2", w2)
	w.reg(topics.KindRegister, "s", "a2", "ta2") // behind the pending window
	w.promote("s", 3, time.Now())

	line, err := w.line.Waiting(w.ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(line) != 299+2 || line[len(line)-1] != "ta1" || line[len(line)-2] != "tl2" {
		t.Fatalf("live line: %d people ending %v", len(line), line[len(line)-3:])
	}
	before := w.snapshot("s")
	w.rebuildFromScratch()
	diff(t, before, w.snapshot("s"))
	if before["s pool"] == "[]" || before["s late"] == "[]" || before["s drawn"] == "" {
		t.Fatalf("the scenario left no pool, late or draw to compare: %v", before)
	}
}

// Late ones queued behind a pre-queue while random mode's windows keep
// pooling: placed after the pre-queue's draw, before the later windows; the
// rebuild agrees at every step.
func TestRebuildReproducesLateOnesBetweenWindows(t *testing.T) {
	w := newWorld(t)
	w.item("m", 0, 60)
	root := draw.Root([]byte("k"), "m", "")
	commit := draw.Commit(root, 3)
	s1, _ := draw.Seed(root, 3, 1)
	for i := range 20 {
		w.pooled("m", "p"+strconv.Itoa(i), "tp"+strconv.Itoa(i), 100)
	}
	w.reg(topics.KindRegister, "m", "l1", "tl1")
	w.pooled("m", "r1", "tr1", 200)
	w.reg(topics.KindRegister, "m", "l2", "tl2")
	before := w.snapshot("m")
	w.rebuildFromScratch()
	diff(t, before, w.snapshot("m"))
	w.draw("m", 100, 1, s1, commit)
	w.promote("m", 3, time.Now()) // rate 0: nobody admitted, the pace kept as a rebuild writes it
	line, err := w.line.Waiting(w.ctx, "m", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(line) != 22 || line[20] != "tl1" || line[21] != "tl2" {
		t.Fatalf("the late ones are not right behind the pre-queue's draw: %v", line)
	}
	before = w.snapshot("m")
	w.rebuildFromScratch()
	diff(t, before, w.snapshot("m"))
}
