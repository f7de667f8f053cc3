// Package steer is the controller that paces an item's admissions by the
// protected site's own health: it steers a concurrency target (the sessions
// the site can hold) and a ramp rate, from the latency buckets, errors,
// arrivals and active sessions the site reports. Pure logic: no Redis, no Kafka.
package steer

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Bucket is one latency histogram bucket: Count requests took at most LeMs
// milliseconds and more than the bucket below (counts are per bucket, not
// cumulative). A bucket with LeMs = +Inf (or math.MaxFloat64) holds the rest.
type Bucket struct {
	LeMs  float64 `json:"le"`
	Count uint64  `json:"count"`
}

// Signal is one report of the site's health over a window that ended At.
// Counts add across the site's instances (buckets merge by LeMs), so a
// percentile is read from the merged histogram, never averaged.
type Signal struct {
	At       time.Time     // when the window closed
	Window   time.Duration // how long the window was
	Buckets  []Bucket      // request latency, per bucket
	Requests uint64        // requests served (the sum of the buckets)
	Errors   uint64        // of those, failed (5xx)
	// Arrivals is how many admitted people reached the site for the first
	// time in the window; ArrivalDelaySumMs adds their delays from
	// admission to arrival, so ArrivalDelaySumMs/Arrivals is the mean delay.
	Arrivals          uint64
	ArrivalDelaySumMs uint64
	// Active is the site's active sessions at At (summed over instances).
	Active int64
}

// MaxBuckets bounds a signal's histogram.
const MaxBuckets = 64

// Problem says why a signal cannot be used, or nil.
func (s Signal) Problem() error {
	switch {
	case len(s.Buckets) == 0 && s.Requests > 0:
		return errors.New("requests without latency buckets")
	case len(s.Buckets) > MaxBuckets:
		return fmt.Errorf("%d buckets, more than %d", len(s.Buckets), MaxBuckets)
	case s.Errors > s.Requests:
		return fmt.Errorf("%d errors out of %d requests", s.Errors, s.Requests)
	case s.Active < 0:
		return fmt.Errorf("active %d is negative", s.Active)
	case s.Window <= 0:
		return fmt.Errorf("window %v is not positive", s.Window)
	}
	var n uint64
	for i, b := range s.Buckets {
		if math.IsNaN(b.LeMs) || b.LeMs < 0 || i > 0 && b.LeMs <= s.Buckets[i-1].LeMs {
			return fmt.Errorf("bucket %d: bounds must be positive and increasing", i)
		}
		n += b.Count
	}
	if n != s.Requests {
		return fmt.Errorf("buckets hold %d requests, requests says %d", n, s.Requests)
	}
	return nil
}

// Merge adds b into a: the counts of the same window from two instances.
// Buckets are merged by bound; At is the later, Window the longer.
func Merge(a, b Signal) Signal {
	byLe := map[float64]uint64{}
	for _, x := range a.Buckets {
		byLe[x.LeMs] += x.Count
	}
	for _, x := range b.Buckets {
		byLe[x.LeMs] += x.Count
	}
	out := Signal{
		At: a.At, Window: max(a.Window, b.Window), Requests: a.Requests + b.Requests, Errors: a.Errors + b.Errors,
		Arrivals: a.Arrivals + b.Arrivals, ArrivalDelaySumMs: a.ArrivalDelaySumMs + b.ArrivalDelaySumMs,
		Active: a.Active + b.Active,
	}
	if b.At.After(a.At) {
		out.At = b.At
	}
	for le, n := range byLe {
		out.Buckets = append(out.Buckets, Bucket{LeMs: le, Count: n})
	}
	sort.Slice(out.Buckets, func(i, j int) bool { return out.Buckets[i].LeMs < out.Buckets[j].LeMs })
	return out
}

// Quantile is the q-quantile (0 < q <= 1) of the histogram, interpolated
// linearly inside the bucket that holds it (the error is at most that
// bucket's width); the last finite bound when it falls in the +Inf bucket;
// 0 without requests.
func (s Signal) Quantile(q float64) time.Duration {
	if s.Requests == 0 {
		return 0
	}
	rank := q * float64(s.Requests)
	var seen float64
	lo := 0.0
	for _, b := range s.Buckets {
		hi := b.LeMs
		if math.IsInf(hi, 1) || hi == math.MaxFloat64 {
			return ms(lo)
		}
		if seen+float64(b.Count) >= rank && b.Count > 0 {
			return ms(lo + (hi-lo)*(rank-seen)/float64(b.Count))
		}
		seen += float64(b.Count)
		lo = hi
	}
	return ms(lo)
}

// ErrorRatio is Errors/Requests (0 without requests).
func (s Signal) ErrorRatio() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Errors) / float64(s.Requests)
}

// ArrivalDelay is the mean delay from admission to arrival (0 without arrivals).
func (s Signal) ArrivalDelay() time.Duration {
	if s.Arrivals == 0 {
		return 0
	}
	return ms(float64(s.ArrivalDelaySumMs) / float64(s.Arrivals))
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
