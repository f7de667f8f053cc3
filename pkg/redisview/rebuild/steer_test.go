package rebuild_test

import (
	"testing"
	"time"

	"github.com/waitroom/waitroom/topics"
)

// The steering controller's effective target is its own record kind: a
// rebuild restores the last decision of each item (and clears one that
// does not apply), so promote admits within the same target as before.
func TestARebuildRestoresTheLastSteeringDecision(t *testing.T) {
	w := newWorld(t)
	w.item("st", 10, 60)
	w.item("adv", 10, 60)
	w.reg(topics.KindRegister, "st", "u1", "t1")
	now := time.Now().Truncate(time.Millisecond)
	steer := func(item string, d topics.SteerDecision, at time.Time) {
		w.produce(topics.Admissions, item, &topics.AdmissionEvent{V: 1, Kind: topics.KindSteer, ItemID: item, Epoch: 3,
			At: at.UnixMilli(), Steer: &d})
		if err := w.line.Steer(w.ctx, item, 3, &d, at); err != nil {
			t.Fatal(err)
		}
	}
	steer("st", topics.SteerDecision{Target: 50, Allow: 60, HeadLimit: 60, Rate: 4, Reason: "grow"}, now.Add(-2*time.Second))
	steer("st", topics.SteerDecision{Target: 40, Allow: 44, HeadLimit: 45, Rate: 2.5, Reason: "shrink"}, now.Add(-time.Second))
	steer("adv", topics.SteerDecision{Target: 40, Allow: 45, HeadLimit: 45, Rate: 2.5, Reason: "shrink"}, now.Add(-time.Second))
	steer("adv", topics.SteerDecision{Target: 9, Allow: 9, HeadLimit: 9, Rate: 1, Advice: true, Reason: "shrink"}, now)
	w.promote("st", 3, now)

	w.rebuildFromScratch()
	got, ok, err := w.line.Steering(w.ctx, "st")
	if err != nil || !ok {
		t.Fatalf("steering of st after the rebuild: %v, %v", ok, err)
	}
	if !got.Applies || got.Rate != 2.5 || got.HeadLimit != 45 || !got.At.Equal(now.Add(-time.Second)) || got.Last.Reason != "shrink" {
		t.Fatalf("steering of st after the rebuild: %+v, want the last decision (2.5/s, head limit 45)", got)
	}
	if adv, ok, err := w.line.Steering(w.ctx, "adv"); err != nil || !ok || adv.Applies || !adv.Last.Advice {
		t.Fatalf("steering of adv after the rebuild: %+v, %v, %v: want the advice kept, not applied", adv, ok, err)
	}
}
