package chaos

import (
	"os"
	"strings"
	"testing"
	"time"
)

// The soak's judgement: a process whose RSS or goroutines grew past x1.1
// between a third of the way in and the end fails it; warm-up before the
// third does not, nor does an unjudged process's growth (kafka here grows
// with every reading); too few readings are no proof.
func TestGrowthJudgesTheLastReadingAgainstAThirdOfTheWay(t *testing.T) {
	at := func(min int, rss, gr int64) sample {
		return sample{At: time.Duration(min) * time.Minute, RSS: map[string]int64{"api-1": rss, "kafka": rss * int64(min)}, Goroutines: map[string]int64{"api-1": gr}}
	}
	hour := func(rss func(min int) int64) []sample {
		var ss []sample
		for m := 1; m <= 60; m++ {
			ss = append(ss, at(m, rss(m), 40))
		}
		return ss
	}
	for _, tc := range []struct {
		name    string
		samples []sample
		bad     string
	}{
		{"flat after a warm-up", []sample{at(0, 10, 10), at(20, 50, 40), at(40, 52, 41), at(60, 54, 43)}, ""},
		{"RSS leaking", []sample{at(0, 50, 40), at(20, 50, 40), at(40, 53, 40), at(60, 56, 40)}, "RSS"},
		{"goroutines leaking", []sample{at(0, 50, 40), at(20, 50, 40), at(40, 50, 44), at(60, 50, 45)}, "goroutines"},
		{"one reading 40% up mid-fault among an hour's", hour(func(m int) int64 { return map[bool]int64{true: 70, false: 50}[m == 59] }), ""},
		{"an hour's slow leak", hour(func(m int) int64 { return 50 + int64(m)/3 }), "RSS"},
		{"a failed reading (zero) at minute 20", hour(func(m int) int64 { return map[bool]int64{true: 0, false: 50}[m == 20] }), ""},
		{"too few readings", []sample{at(20, 50, 40), at(60, 50, 40)}, "too few"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := growth(tc.samples, 1.1, map[string]bool{"kafka": true})
			if tc.bad == "" && len(bad) > 0 || tc.bad != "" && (len(bad) != 1 || !strings.Contains(bad[0], tc.bad)) {
				t.Fatalf("growth = %q, want one about %q", bad, tc.bad)
			}
		})
	}
}

// The meter reads a live process's resident memory.
func TestRSSOfThisProcess(t *testing.T) {
	if n := rssKiB(os.Getpid()); n <= 0 {
		t.Fatalf("VmRSS of this process: %d KiB", n)
	}
}
