package registration

import (
	"math"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/topics"
)

// Pace is what the line measured of an item's admissions.
type Pace struct {
	// AdmittedLastMinute is how many were admitted in the last minute.
	AdmittedLastMinute int64
	// Since is when the oldest of those was admitted (zero: none).
	Since time.Time
	// Active is how many hold an admission now (the admitted set).
	Active int64
}

// PaceOf is the pace a status read carries.
func PaceOf(st line.Status) Pace {
	p := Pace{AdmittedLastMinute: st.AdmittedLastMinute, Active: st.Active}
	if st.PacedSinceMs > 0 {
		p.Since = time.UnixMilli(st.PacedSinceMs)
	}
	return p
}

// PaceOfPlace is the pace an exact place read carries.
func PaceOfPlace(pl line.Place) Pace {
	return PaceOf(line.Status{AdmittedLastMinute: pl.AdmittedLastMinute, PacedSinceMs: pl.PacedSinceMs, Active: pl.Active})
}

// Paused reports whether the item admits nobody for now (no ETA then): paused
// (which keeps its rate) or at rate 0.
func Paused(it topics.ItemState) bool { return !it.Policy.Admitting() }

// ETA estimates the seconds until the registration at position pos (1: next)
// is admitted, at now; ok is false, and there is no ETA, while admission is
// paused or the item is closed, sold out or unknown.
//
// People ahead ÷ the rate at which places really free up. The scheduler
// admits at the item's rate R while the admitted set has room, so the first
// free = maxActive − active people get in at R. Past them (when maxActive is
// set) a place frees only when an admission completes or expires, so they get
// in at the item's measured admission pace (the admissions of the last minute
// over the time they span: with the set full, every admission is a freed
// place), or, before any admission was measured, at maxActive ÷ sessionTTL,
// the rate of expiries alone. That freeing rate is kept within
// [maxActive ÷ sessionTTL, R]: no faster than the scheduler admits, no slower
// than admissions expire. So
//
//	eta = min(pos, free) ÷ R + max(0, pos − free) ÷ freeing
//
// Bound: while the item's rate and policy stay as they are and nobody ahead
// leaves, the wait is at most min(pos, free) ÷ R + max(0, pos − free) ×
// sessionTTL ÷ maxActive plus one scheduler tick and the delivery latency;
// completions and leaves only shorten it. Early in a drop, while the set is
// still filling at R, the measured pace runs ahead of the freeing rate and
// the estimate for those past the room is short; it corrects itself as the
// pace settles.
func ETA(pos int64, p Pace, it topics.ItemState, known bool, now time.Time) (secs int64, ok bool) {
	if VerdictOf(it, known) == Open && it.ModeOf() == topics.ModePassthrough && !it.Policy.Paused {
		return 1, true // the room is off: everyone goes in at the next tick
	}
	if VerdictOf(it, known) != Open || Paused(it) {
		return 0, false
	}
	rate := it.Policy.RatePerSecond
	if pos < 1 {
		pos = 1
	}
	if steered(it) {
		return steeredETA(pos, p, it, now), true
	}
	free, maxActive := float64(pos), it.Policy.MaxActive
	if maxActive > 0 {
		free = float64(max(0, maxActive-p.Active))
	}
	n := float64(pos)
	t := min(n, free) / rate
	if rest := n - free; rest > 0 {
		ttl := float64(it.Policy.SessionTTLSeconds)
		if ttl <= 0 {
			ttl = 300 // the line's default session
		}
		floor := float64(maxActive) / ttl
		freeing := floor
		if p.AdmittedLastMinute > 0 && !p.Since.IsZero() {
			span := max(now.Sub(p.Since).Seconds(), 1)
			freeing = float64(p.AdmittedLastMinute) / span
		}
		freeing = min(max(freeing, floor), rate)
		t += rest / freeing
	}
	return max(1, int64(math.Round(t))), true // a waiting person waits at least a tick
}

// steered reports an item whose admissions the steering controller paces
// (advise-only applies nothing: the policy runs).
func steered(it topics.ItemState) bool {
	return it.Policy.Steer != nil && it.Policy.Steer.Mode != topics.SteerAdvise && it.Policy.MaxRate > 0
}

// steeredETA is the wait at the effective rate: the controller sets the
// rate and the room within [minRate, maxRate] (and never above the
// policy's rate), so the measured pace of the last minute is the rate
// that applies; before any admission was measured, minRate, the slowest
// the controller may go (or maxRate's tenth when minRate is 0).
//
//	eta = pos ÷ clamp(admitted last minute ÷ its span, minRate, min(maxRate, ratePerSecond))
//
// Bound: it holds while the site's health, and so the effective rate, stays
// as it is; the controller moves the rate at most once per measured
// arrival delay, so the estimate follows within a minute.
func steeredETA(pos int64, p Pace, it topics.ItemState, now time.Time) int64 {
	hi := min(it.Policy.MaxRate, it.Policy.RatePerSecond)
	lo := min(it.Policy.MinRate, hi)
	rate := lo
	if rate <= 0 {
		rate = hi / 10
	}
	if p.AdmittedLastMinute > 0 && !p.Since.IsZero() {
		rate = float64(p.AdmittedLastMinute) / max(now.Sub(p.Since).Seconds(), 1)
	}
	rate = min(max(rate, lo, 1e-3), hi)
	return max(1, int64(math.Round(float64(pos)/rate)))
}
