package rebuild_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// The api applies a completion at once and records it after; a consumer
// that lags applies the record later, so the admissions the scheduler
// decides in between (on the freed places) carry applied offsets before the
// completion's record. A rebuild replays them in that order: mid-replay the
// admitted set holds more than maxActive (unread: the view's marker says
// rebuilding), and the completions replayed after bring it back. The chaos
// suite's sampler skips that state (services/dev/chaos, sampler); this
// pins that the rebuilt view itself is the live one, within maxActive.
func TestARebuildEndsWithinMaxActiveWhenCompletionsAreRecordedAfterLaterAdmissions(t *testing.T) {
	w := newWorld(t)
	const maxActive = 2
	s := topics.ItemState{V: 1, ItemID: "cap", Name: "cap", Stock: -1, Enabled: true, Version: time.Now().UnixNano(),
		Policy: topics.AdmissionPolicy{RatePerSecond: 100, MaxActive: maxActive, SessionTTLSeconds: 60}}
	w.produce(topics.Items, "cap", &s)
	if _, err := w.line.ApplyItem(w.ctx, s); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		w.reg(topics.KindRegister, "cap", "u"+strconv.Itoa(i), "t"+strconv.Itoa(i))
	}
	now := time.Now().Add(-10 * time.Second)
	w.promote("cap", 3, now)
	var lagging []*kgo.Record // completion records the consumer has not applied yet
	for i := range 6 {        // t0..t5 complete one by one; each freed place is admitted again
		tok, user := "t"+strconv.Itoa(i), "u"+strconv.Itoa(i)
		if ok, err := w.line.Complete(w.ctx, "cap", tok, user); err != nil || !ok {
			t.Fatalf("complete %s: %v, %v", tok, ok, err)
		}
		lagging = append(lagging, w.produce(topics.Registrations, "cap", &topics.RegistrationEvent{V: 1, Kind: topics.KindComplete,
			ItemID: "cap", UserID: user, TokenID: tok, RequestedAt: now.UnixMilli()}))
		now = now.Add(time.Second)
		w.promote("cap", 3, now)
	}
	for i, r := range lagging {
		op := queue.Op{Kind: queue.OpComplete, ItemID: "cap", TokenID: "t" + strconv.Itoa(i), UserID: "u" + strconv.Itoa(i), Partition: r.Partition, Offset: r.Offset}
		if _, err := w.line.Apply(w.ctx, []queue.Op{op}); err != nil {
			t.Fatal(err)
		}
	}
	live := w.rdb.ZRange(w.ctx, queue.KeysFor("cap").Admitted, 0, -1).Val()
	if len(live) != maxActive {
		t.Fatalf("live: admitted %v, want %d (the scenario did not fill the cap)", live, maxActive)
	}
	before := w.snapshot("cap")

	rep := w.rebuildFromScratch()
	if rep.Admitted > maxActive {
		t.Errorf("the rebuilt view has %d admitted, over maxActive %d", rep.Admitted, maxActive)
	}
	diff(t, before, w.snapshot("cap"))
}
