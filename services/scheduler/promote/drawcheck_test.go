package promote

import (
	"testing"
	"time"
)

// A tick looks for due draws on the first tick, then once an interval, and
// again at once when the clock went back.
func TestDrawChecksAreSpacedByTheInterval(t *testing.T) {
	var d draws
	t0 := time.UnixMilli(1_000_000)
	for _, c := range []struct {
		at   time.Duration
		want bool
	}{{0, true}, {200 * time.Millisecond, false}, {999 * time.Millisecond, false}, {time.Second, true},
		{1200 * time.Millisecond, false}, {2100 * time.Millisecond, true}, {500 * time.Millisecond, true}} {
		if got := d.checkDue(t0.Add(c.at), time.Second); got != c.want {
			t.Errorf("at +%s: checkDue = %v, want %v", c.at, got, c.want)
		}
	}
}
