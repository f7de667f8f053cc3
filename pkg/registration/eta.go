package registration

import (
	"math"

	"github.com/waitroom/waitroom/topics"
)

// Pace is what the line measured of an item's admissions.
type Pace struct {
	// AdmittedLastMinute is how many were admitted in the last minute.
	AdmittedLastMinute int64
}

// ETA estimates the seconds until the registration at position pos is
// admitted: the position over the item's admissions per second in the last
// minute, or over the configured rate while nobody was admitted lately. ok is
// false (no ETA) while admission is paused or the item is not open.
func ETA(pos int64, p Pace, it topics.ItemState, known bool) (secs int64, ok bool) {
	if VerdictOf(it, known) != Open {
		return 0, false
	}
	rate := float64(p.AdmittedLastMinute) / 60
	if rate <= 0 {
		rate = it.Policy.RatePerSecond
	}
	if rate <= 0 {
		return 0, false
	}
	return int64(math.Ceil(float64(pos) / rate)), true
}
