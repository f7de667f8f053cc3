package registration_test

import (
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/topics"
)

// No ETA while nobody is admitted, even right after a minute of admissions:
// a paused item (which keeps its rate) and an item at rate 0 alike.
func TestNoETAWhilePaused(t *testing.T) {
	open := topics.ItemState{ItemID: "i", Stock: -1, Enabled: true, Policy: topics.AdmissionPolicy{RatePerSecond: 5}}
	paused, zero := open, open
	paused.Policy.Paused = true
	zero.Policy.RatePerSecond = 0
	recent := registration.Pace{AdmittedLastMinute: 600}
	if _, ok := registration.ETA(10, recent, open, true, time.Now()); !ok {
		t.Fatal("an admitting item has an ETA")
	}
	for name, it := range map[string]topics.ItemState{"paused": paused, "rate 0": zero} {
		if secs, ok := registration.ETA(10, recent, it, true, time.Now()); ok {
			t.Errorf("%s: ETA %d s, want none", name, secs)
		}
	}
}
