package cli

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	oneTo := func(n int) []time.Duration {
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = time.Duration(i+1) * time.Millisecond
		}
		return d
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one value is every percentile", []time.Duration{7}, 99, 7},
		{"p50 of 1..100", oneTo(100), 50, 50 * time.Millisecond},
		{"p90 of 1..100", oneTo(100), 90, 90 * time.Millisecond},
		{"p99 of 1..100", oneTo(100), 99, 99 * time.Millisecond},
		{"p100 is the max", oneTo(100), 100, 100 * time.Millisecond},
		{"p99 of 10 values is the largest", oneTo(10), 99, 10 * time.Millisecond},
		{"p50 of 4 values is the lower middle", oneTo(4), 50, 2 * time.Millisecond},
		{"p50 of 5 values is the middle", oneTo(5), 50, 3 * time.Millisecond},
		{"tiny p is the min", oneTo(1000), 0.01, 1 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Percentile(tc.in, tc.p))
		})
	}
}

func TestSummarizeSortsAndReportsMax(t *testing.T) {
	d := []time.Duration{5 * time.Millisecond, 1 * time.Millisecond, 9 * time.Millisecond, 3 * time.Millisecond}
	l := Summarize(d)
	assert.Equal(t, Latency{Count: 4, P50: 3 * time.Millisecond, P90: 9 * time.Millisecond, P99: 9 * time.Millisecond, Max: 9 * time.Millisecond}, l)
	assert.Equal(t, "p50=3.00ms p90=9.00ms p99=9.00ms max=9.00ms", l.String())
	assert.Equal(t, "no samples", Summarize(nil).String())

	b, err := json.Marshal(Latency{Count: 2, P50: 1500 * time.Microsecond, Max: 2 * time.Second})
	require.NoError(t, err)
	assert.JSONEq(t, `{"count":2,"p50Ms":1.5,"p90Ms":0,"p99Ms":0,"maxMs":2000}`, string(b))
}
