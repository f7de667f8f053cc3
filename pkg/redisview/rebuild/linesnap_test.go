package rebuild_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/redisview/linesnap"
	"github.com/waitroom/waitroom/topics"
)

// TestRebuildProvenByLineSnapshots is what an operator does with waitroomctl
// line snapshot / line diff: snapshot every line, lose Redis, rebuild from
// Kafka, snapshot again; the snapshots must be the same.
func TestRebuildProvenByLineSnapshots(t *testing.T) {
	w := newWorld(t)
	w.item("show", 4, 60)
	w.item("brief", 3, 1)
	now := time.Now()
	for i := range 30 {
		w.reg(topics.KindRegister, "show", "u"+strconv.Itoa(i), "ts"+strconv.Itoa(i))
		w.reg(topics.KindRegister, "brief", "u"+strconv.Itoa(i), "tb"+strconv.Itoa(i))
	}
	w.promote("show", 3, now.Add(-3*time.Second))
	w.promote("brief", 3, now.Add(-3*time.Second)) // expired by now (ttl 1 s)
	w.promote("show", 3, now.Add(-2*time.Second))
	w.reg(topics.KindLeave, "show", "u0", "ts0")       // admitted, leaves
	w.reg(topics.KindComplete, "show", "u1", "ts1")    // admitted, completes
	w.reg(topics.KindLeave, "show", "u20", "ts20")     // waiting, leaves
	w.reg(topics.KindRegister, "show", "u20", "ts20b") // and comes back last
	w.reg(topics.KindRegister, "brief", "u1", "tb1b")  // expired, registers again

	at := time.Now()
	take := func(item string) *linesnap.Snapshot {
		s, err := linesnap.Take(w.ctx, w.rdb, item, at)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := map[string]*linesnap.Snapshot{"show": take("show"), "brief": take("brief")}
	if n := len(before["show"].Entries); n != 30 { // one per user: u20's first token gave way to her second
		t.Fatalf("show has %d tokens before, want 30", n)
	}
	states := map[line.State]int{}
	for _, b := range before {
		for _, e := range b.Entries {
			states[e.State]++
		}
	}
	for _, st := range []line.State{line.Waiting, line.Admitted, line.LeftLine, line.Completed, line.Gone} {
		if states[st] == 0 {
			t.Fatalf("no %s token before the rebuild: the test would prove less than it claims (%v)", st, states)
		}
	}
	w.rebuildFromScratch()
	for item, b := range before {
		if d := linesnap.Diff(b, take(item)); len(d) > 0 {
			t.Errorf("%s after the rebuild differs from before:\n%v", item, d)
		}
	}
}
