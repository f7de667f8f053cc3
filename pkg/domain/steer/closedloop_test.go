package steer

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// halved is the synthetic site's capacity over a run: 300 sessions, halved
// from minute 8 to minute 13 (a slow dependency), then back.
func halved(el time.Duration) float64 {
	if el >= 8*time.Minute && el < 13*time.Minute {
		return 150
	}
	return 300
}

func simConfig() Config {
	return Config{TargetP95: 300 * time.Millisecond, MinRate: 0.5, MaxRate: 20, MinStep: 5 * time.Second}
}

// windowP95 is the p95 of the site's requests in each 30 s of a run, from
// the merged histograms of its signals (one every 2 s).
func windowP95(sigs []Signal, from, to time.Duration) []time.Duration {
	var out []time.Duration
	for lo := from; lo < to; lo += 30 * time.Second {
		var w Signal
		for i, s := range sigs {
			if el := time.Duration(i+1) * 2 * time.Second; el > lo && el <= lo+30*time.Second {
				w = Merge(w, s)
			}
		}
		out = append(out, w.Quantile(0.95))
	}
	return out
}

func TestControllerHoldsTheSiteUnderTargetSettlesAndRecovers(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		s := newSite(seed, 300, 0.8)
		c, _ := New(simConfig(), 20)
		ds, sigs := s.run(c, 0, 20*time.Minute, halved)
		for i, d := range ds {
			if d.Rate > 20 || d.Rate < 0.5 {
				t.Fatalf("seed %d step %d: rate %v outside [0.5, 20]", seed, i, d.Rate)
			}
		}
		at := func(el time.Duration) int { return int(el/(2*time.Second)) - 1 }
		// Settled: minutes 5 to 8, the target within 20% of its mean.
		settled := ds[at(5*time.Minute):at(8*time.Minute)]
		var sum float64
		for _, d := range settled {
			sum += float64(d.Target)
		}
		mean := sum / float64(len(settled))
		for _, d := range settled {
			if dev := (float64(d.Target) - mean) / mean; dev > 0.2 || dev < -0.2 {
				t.Fatalf("seed %d: target %d is %.0f%% off its settled mean %.0f", seed, d.Target, 100*dev, mean)
			}
		}
		// The spike starts at 0: p95 is under target from minute 2 on.
		for i, p := range windowP95(sigs, 2*time.Minute, 8*time.Minute) {
			if p > 300*time.Millisecond {
				t.Fatalf("seed %d: window %d after the spike: p95 %v over the 300 ms target", seed, i, p)
			}
		}
		// The site slows at minute 8: p95 is under target again once the
		// sessions admitted before have ended (they last up to 135 s;
		// nobody can be un-admitted).
		for i, p := range windowP95(sigs, 10*time.Minute+30*time.Second, 13*time.Minute) {
			if p > 300*time.Millisecond {
				t.Fatalf("seed %d: 150 s after the slow-down, window %d: p95 %v", seed, i, p)
			}
		}
		// Healthy again at minute 13: the target grows back.
		if slow, back := ds[at(13*time.Minute)].Target, ds[at(20*time.Minute)].Target; back < slow*3/2 {
			t.Fatalf("seed %d: target %d when the site healed, %d seven minutes later", seed, slow, back)
		}
	}
}

func TestNoShowsKeepTheSiteNearTarget(t *testing.T) {
	// The same site, 40% of the admitted never arriving: the site's sessions
	// settle where they do with everyone arriving.
	active := func(show float64) float64 {
		s := newSite(3, 300, show)
		c, _ := New(simConfig(), 20)
		ds, _ := s.run(c, 0, 8*time.Minute, nil)
		var sum float64
		for _, d := range ds[len(ds)/2:] {
			sum += float64(d.SiteActive)
		}
		return sum / float64(len(ds)-len(ds)/2)
	}
	all, some := active(1), active(0.6)
	if some < 0.85*all {
		t.Fatalf("site sessions %.0f with 40%% no-shows, %.0f without: no-shows not replaced", some, all)
	}
}

// BenchmarkSite compares fixed rates with the controller on the synthetic
// site (capacity 300 sessions; "slowdown" halves it in minutes 8-13) over 20
// simulated minutes of an endless line: the site's p99 over the run, the
// people it served a minute and the share of failed requests.
func BenchmarkSite(b *testing.B) {
	for _, sc := range []struct {
		name  string
		capOf func(time.Duration) float64
	}{{"steady", nil}, {"slowdown", halved}} {
		for _, tc := range []struct {
			name  string
			fixed float64
		}{{"fixed-2/s", 2}, {"fixed-3/s", 3}, {"fixed-5/s", 5}, {"controller", 0}} {
			b.Run(sc.name+"/"+tc.name, func(b *testing.B) {
				var p99, served, errs float64
				for i := 0; i < b.N; i++ {
					s := newSite(uint64(i+1), 300, 0.8)
					var c *Controller
					if tc.fixed == 0 {
						c, _ = New(simConfig(), 20)
					}
					s.run(c, tc.fixed, 20*time.Minute, sc.capOf)
					p99 += float64(s.p99(0).Milliseconds())
					served += float64(s.served) / 20
					errs += float64(s.errs) / float64(max(len(s.lat), 1))
				}
				b.ReportMetric(p99/float64(b.N), "p99-ms")
				b.ReportMetric(served/float64(b.N), "served/min")
				b.ReportMetric(100*errs/float64(b.N), "err-%")
			})
		}
	}
}

func TestTraceClosedLoop(t *testing.T) {
	if os.Getenv("STEER_TRACE") == "" {
		t.Skip("STEER_TRACE=1 prints a run")
	}
	seed, _ := strconv.ParseUint(os.Getenv("STEER_TRACE"), 10, 64)
	s := newSite(seed, 300, 0.8)
	c, _ := New(simConfig(), 20)
	ds, _ := s.run(c, 0, 20*time.Minute, halved)
	for i, d := range ds {
		if i%5 == 0 {
			fmt.Printf("%4ds tgt %4d allow %4d rate %5.1f p95 %5dms site %4d show %.2f delay %v %s\n", (i+1)*2, d.Target, d.Allow, d.Rate,
				d.P95.Milliseconds(), d.SiteActive, d.ShowRatio, d.Delay.Round(100*time.Millisecond), d.Reason)
		}
	}
}
