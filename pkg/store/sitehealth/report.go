// Package sitehealth carries the protected site's health signal from the
// site to the steering controller: the report a kit (or any site) posts to
// the api, its checks, its store in Redis, and the merge of the instances'
// reports into one steer.Signal for the scheduler.
package sitehealth

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/steer"
)

// Bounds of a report: a site posts one every few seconds from each of its
// instances; anything bigger is refused, not truncated.
const (
	MaxBuckets   = steer.MaxBuckets - 1 // finite bounds; the counts have one more (+Inf)
	MaxInstances = 64                   // instances of one item's site reporting at once
	MinWindow    = 100 * time.Millisecond
	MaxWindow    = time.Minute
	MaxBodyBytes = 8 << 10
	MaxCount     = 1 << 40 // any count beyond is a broken reporter
)

// Report is what one instance of the site saw over its last window
// (POST /api/v1/items/{itemId}/signal). Latency is a histogram: Counts[i]
// requests took at most BoundsMs[i] and more than BoundsMs[i-1]; the last
// count (one more than the bounds) is the rest. Counts add across
// instances, so a percentile is read from the merged histogram, never an
// average of percentiles.
type Report struct {
	Instance string    `json:"instance"` // the reporting instance (1-64 of [A-Za-z0-9._:-])
	WindowMs int64     `json:"windowMs"` // how long the window was
	BoundsMs []float64 `json:"boundsMs"` // increasing, positive
	Counts   []uint64  `json:"counts"`   // len(BoundsMs)+1
	Errors   uint64    `json:"errors"`   // failed requests (5xx) of the window
	// Arrivals are the admitted people first seen in the window, and
	// ArrivalDelayMsSum the sum of their delays from admission to arrival.
	Arrivals          uint64 `json:"arrivals"`
	ArrivalDelayMsSum uint64 `json:"arrivalDelayMsSum"`
	Active            int64  `json:"active"` // the instance's active sessions now
	// At is when the api received it (unix ms), set by the api: the site's
	// clock is not trusted.
	At int64 `json:"at,omitempty"`
}

// ErrInvalid is a report whose fields break the contract (400).
var ErrInvalid = errors.New("invalid signal report")

// Validate checks r against the contract.
func (r *Report) Validate(validID func(string) bool) error {
	var sum uint64
	for _, c := range r.Counts {
		if c > MaxCount {
			return fmt.Errorf("%w: a count above %d", ErrInvalid, uint64(MaxCount))
		}
		sum += c
	}
	switch {
	case !validID(r.Instance):
		return fmt.Errorf("%w: instance %q must be 1-64 characters of [A-Za-z0-9._:-]", ErrInvalid, r.Instance)
	case r.WindowMs < MinWindow.Milliseconds() || r.WindowMs > MaxWindow.Milliseconds():
		return fmt.Errorf("%w: windowMs %d is not in %d..%d", ErrInvalid, r.WindowMs, MinWindow.Milliseconds(), MaxWindow.Milliseconds())
	case len(r.BoundsMs) > MaxBuckets:
		return fmt.Errorf("%w: %d bounds, more than %d", ErrInvalid, len(r.BoundsMs), MaxBuckets)
	case len(r.Counts) != len(r.BoundsMs)+1:
		return fmt.Errorf("%w: %d counts for %d bounds (one more: the +Inf bucket)", ErrInvalid, len(r.Counts), len(r.BoundsMs))
	case r.Errors > sum:
		return fmt.Errorf("%w: %d errors out of %d requests", ErrInvalid, r.Errors, sum)
	case r.Arrivals > MaxCount || r.ArrivalDelayMsSum > MaxCount*1000:
		return fmt.Errorf("%w: arrivals out of bounds", ErrInvalid)
	case r.Active < 0 || r.Active > MaxCount:
		return fmt.Errorf("%w: active %d out of bounds", ErrInvalid, r.Active)
	}
	for i, b := range r.BoundsMs {
		if math.IsNaN(b) || math.IsInf(b, 0) || b <= 0 || i > 0 && b <= r.BoundsMs[i-1] {
			return fmt.Errorf("%w: boundsMs must be finite, positive and increasing", ErrInvalid)
		}
	}
	return nil
}

// Signal is the report as the controller reads it.
func (r *Report) Signal() steer.Signal {
	s := steer.Signal{
		At: time.UnixMilli(r.At), Window: time.Duration(r.WindowMs) * time.Millisecond, Errors: r.Errors,
		Arrivals: r.Arrivals, ArrivalDelaySumMs: r.ArrivalDelayMsSum, Active: r.Active,
	}
	for i, c := range r.Counts {
		le := math.Inf(1)
		if i < len(r.BoundsMs) {
			le = r.BoundsMs[i]
		}
		s.Buckets = append(s.Buckets, steer.Bucket{LeMs: le, Count: c})
		s.Requests += c
	}
	return s
}
