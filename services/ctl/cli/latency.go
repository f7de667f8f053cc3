package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest value at or below which p% of the values
// lie. It returns 0 for no values.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Latency summarises a set of durations.
type Latency struct {
	Count int
	P50   time.Duration
	P90   time.Duration
	P99   time.Duration
	Max   time.Duration
}

// Summarize sorts d in place (the benches keep every sample: n is bounded)
// and returns its percentiles.
func Summarize(d []time.Duration) Latency {
	slices.Sort(d)
	l := Latency{Count: len(d), P50: Percentile(d, 50), P90: Percentile(d, 90), P99: Percentile(d, 99)}
	if len(d) > 0 {
		l.Max = d[len(d)-1]
	}
	return l
}

// String renders l for a terminal.
func (l Latency) String() string {
	if l.Count == 0 {
		return "no samples"
	}
	return fmt.Sprintf("p50=%s p90=%s p99=%s max=%s", ms(l.P50), ms(l.P90), ms(l.P99), ms(l.Max))
}

// MarshalJSON renders l in milliseconds.
func (l Latency) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Count int     `json:"count"`
		P50   float64 `json:"p50Ms"`
		P90   float64 `json:"p90Ms"`
		P99   float64 `json:"p99Ms"`
		Max   float64 `json:"maxMs"`
	}{l.Count, msf(l.P50), msf(l.P90), msf(l.P99), msf(l.Max)})
}

func msf(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/1e6) }
