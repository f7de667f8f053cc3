package steer

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

func hist(p95ms float64, n uint64) Signal {
	// n requests: 95% at most p95ms, so the 95th is exactly p95ms.
	fast := n * 95 / 100
	return Signal{
		Buckets:  []Bucket{{p95ms, fast}, {2 * p95ms, n - fast}, {math.Inf(1), 0}},
		Requests: n, Window: 2 * time.Second,
	}
}

func TestQuantileInterpolatesInsideTheBucketAndNeverAverages(t *testing.T) {
	s := Signal{Buckets: []Bucket{{100, 50}, {200, 50}, {math.Inf(1), 0}}, Requests: 100, Window: time.Second}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 100 * time.Millisecond}, {0.75, 150 * time.Millisecond}, {0.95, 190 * time.Millisecond}, {0.25, 50 * time.Millisecond}} {
		if got := s.Quantile(tc.q); got != tc.want {
			t.Errorf("q%.2f = %v, want %v", tc.q, got, tc.want)
		}
	}
	inf := Signal{Buckets: []Bucket{{100, 1}, {math.Inf(1), 9}}, Requests: 10, Window: time.Second}
	if got := inf.Quantile(0.95); got != 100*time.Millisecond {
		t.Errorf("p95 in the +Inf bucket = %v, want the last finite bound", got)
	}
	// Two instances: one fast, one slow. Their p95s averaged would be 105 ms;
	// the merged histogram's p95 is in the slow bucket.
	a := Signal{Buckets: []Bucket{{10, 90}, {200, 10}}, Requests: 100, Window: time.Second, Active: 3}
	b := Signal{Buckets: []Bucket{{10, 90}, {200, 10}}, Requests: 100, Window: time.Second, Active: 4}
	m := Merge(a, b)
	if m.Requests != 200 || m.Active != 7 || len(m.Buckets) != 2 || m.Buckets[1].Count != 20 {
		t.Fatalf("merge = %+v", m)
	}
	if err := m.Problem(); err != nil {
		t.Fatalf("merged signal refused: %v", err)
	}
}

func TestSignalProblemRefusesWhatCannotBeRead(t *testing.T) {
	good := hist(100, 100)
	for name, s := range map[string]Signal{
		"no window":       {Buckets: good.Buckets, Requests: 100},
		"count mismatch":  {Buckets: good.Buckets, Requests: 99, Window: time.Second},
		"errors > reqs":   {Errors: 1, Window: time.Second},
		"bounds unsorted": {Buckets: []Bucket{{100, 1}, {50, 1}}, Requests: 2, Window: time.Second},
		"negative active": {Active: -1, Window: time.Second},
		"too many":        {Buckets: make([]Bucket, MaxBuckets+1), Window: time.Second},
	} {
		if s.Problem() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := good.Problem(); err != nil {
		t.Fatalf("good signal refused: %v", err)
	}
}

func cfg() Config {
	return Config{TargetP95: 300 * time.Millisecond, MinRate: 1, MaxRate: 50, MinStep: 5 * time.Second}
}

// stepAt steps c at t0+at with a signal of p95 and active sessions, the
// signal's window ending at the same time.
func stepAt(c *Controller, at time.Duration, p95ms float64, active int64, line Line) Decision {
	s := hist(p95ms, 1000)
	s.At, s.Active = t0.Add(at), active
	return c.Step(t0.Add(at), &s, line)
}

func TestTargetMovesByTheGradientWithHysteresis(t *testing.T) {
	for _, tc := range []struct {
		name   string
		p95ms  float64
		active int64
		reason string
		lo, hi int64
	}{
		{"over target shrinks by the mean of 1 and target/p95 (of the shrink line)", 600, 100, ReasonShrink, 71, 71},
		{"far over target at most halves", 60_000, 100, ReasonShrink, 50, 51},
		{"just over the shrink line shrinks at least 10%", 275, 100, ReasonShrink, 90, 90},
		{"over target with the site above the target waits for sessions to end", 600, 150, ReasonDrain, 100, 100},
		{"inside the band holds", 250, 100, ReasonBand, 100, 100},
		{"far under the band with the target used grows by sqrt(target)", 50, 95, ReasonGrow, 110, 110},
		{"just under the band grows a little", 200, 95, ReasonGrow, 101, 104},
		{"under the band with the target unused holds (no windup)", 50, 20, ReasonIdle, 100, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(cfg(), 100)
			if err != nil {
				t.Fatal(err)
			}
			stepAt(c, 0, 250, 100, Line{})
			d := stepAt(c, 10*time.Second, tc.p95ms, tc.active, Line{})
			if d.Reason != tc.reason || d.Target < tc.lo || d.Target > tc.hi {
				t.Fatalf("got %q target %d, want %q in %d..%d", d.Reason, d.Target, tc.reason, tc.lo, tc.hi)
			}
			if d.Moved != (tc.reason == ReasonGrow || tc.reason == ReasonShrink) {
				t.Fatalf("moved = %v for %q", d.Moved, d.Reason)
			}
		})
	}
}

func TestTargetStepsNoFasterThanTheMeasuredDelay(t *testing.T) {
	c, _ := New(cfg(), 100)
	line := Line{}
	sig := hist(600, 1000)
	sig.At, sig.Active, sig.Arrivals, sig.ArrivalDelaySumMs = t0, 100, 10, 10*20_000 // 20 s from admission to arrival
	c.Step(t0, &sig, line)
	var moves []time.Duration
	for at := 2 * time.Second; at <= 90*time.Second; at += 2 * time.Second {
		s := sig
		s.At = t0.Add(at)
		d := c.Step(t0.Add(at), &s, line)
		sig.Active = d.Target // the site follows the target at once
		if d.Moved {
			moves = append(moves, at)
		}
		if d.Delay < 19*time.Second || d.Delay > 21*time.Second {
			t.Fatalf("measured delay %v, want 20 s", d.Delay)
		}
	}
	if len(moves) < 2 {
		t.Fatalf("moves at %v: want at least two in 90 s of a p95 over target", moves)
	}
	for i := 1; i < len(moves); i++ {
		if gap := moves[i] - moves[i-1]; gap < 22*time.Second {
			t.Fatalf("moves at %v: %v apart, under the 20 s delay plus the 2 s window", moves, gap)
		}
	}
}

func TestRateStaysWithinTheOperatorsBounds(t *testing.T) {
	c, _ := New(cfg(), 100)
	for i, tc := range []struct {
		p95ms    float64
		active   int64
		arrivals uint64
	}{{50, 0, 0}, {50, 90, 10_000}, {3000, 500, 0}, {280, 100, 20}} {
		s := hist(tc.p95ms, 1000)
		s.At, s.Active, s.Arrivals = t0.Add(time.Duration(i)*10*time.Second), tc.active, tc.arrivals
		d := c.Step(s.At, &s, Line{})
		if d.Rate < 1 || d.Rate > 50 {
			t.Fatalf("step %d: rate %v outside [1, 50]", i, d.Rate)
		}
	}
}

func TestLostSignalHoldsOrGivesBackTheStaticPolicy(t *testing.T) {
	for _, lost := range []OnLost{Hold, Static} {
		cf := cfg()
		cf.OnLost, cf.SignalTimeout = lost, 10*time.Second
		c, _ := New(cf, 100)
		before := stepAt(c, 0, 250, 80, Line{AdmittedTotal: 80})
		s := hist(3000, 1000)
		s.At, s.Active = t0, 80
		d := c.Step(t0.Add(11*time.Second), &s, Line{AdmittedTotal: 80}) // a slow old signal must not count
		if d.Target != before.Target || d.Rate != before.Rate || d.Moved {
			t.Fatalf("%s: lost signal moved %+v to %+v", lost, before, d)
		}
		if d.Static != (lost == Static) {
			t.Fatalf("%s: static = %v (%s)", lost, d.Static, d.Reason)
		}
		if d = c.Step(t0.Add(12*time.Second), nil, Line{}); d.Static != (lost == Static) {
			t.Fatalf("%s: no signal at all: static = %v", lost, d.Static)
		}
	}
}

func TestNoSignalYetRunsTheStaticPolicy(t *testing.T) {
	c, _ := New(cfg(), 100)
	if d := c.Step(t0, nil, Line{}); !d.Static || d.Reason != ReasonNoSignal {
		t.Fatalf("before any signal: %+v, want the static policy", d)
	}
}

func TestLockHoldsTheTargetAndAdviseAppliesNothing(t *testing.T) {
	cf := cfg()
	cf.Mode = Lock
	c, _ := New(cf, 100)
	stepAt(c, 0, 250, 100, Line{})
	if d := stepAt(c, 30*time.Second, 3000, 100, Line{}); d.Target != 100 || d.Reason != ReasonLocked {
		t.Fatalf("locked: %q target %d", d.Reason, d.Target)
	}
	cf.Mode = Advise
	c, _ = New(cf, 100)
	stepAt(c, 0, 250, 100, Line{})
	if d := stepAt(c, 30*time.Second, 3000, 100, Line{}); !d.Advice || !d.Moved || d.Target >= 100 {
		t.Fatalf("advise: %+v, want a shrink marked advice", d)
	}
}

func TestNoShowsAreReplaced(t *testing.T) {
	// Half of the admitted never arrive: the cap lets in twice the headroom.
	c, _ := New(cfg(), 100)
	line := Line{AdmittedTotal: 60}
	for at := time.Duration(0); at <= 60*time.Second; at += 2 * time.Second {
		s := hist(250, 1000)
		s.At, s.Active, s.Arrivals, s.ArrivalDelaySumMs = t0.Add(at), 60, 5, 5*1000
		if at > 0 {
			line.AdmittedTotal += 10 // 10 admitted every 2 s, 5 arrive
		}
		c.Step(s.At, &s, line)
	}
	s := hist(250, 1000)
	s.At, s.Active = t0.Add(62*time.Second), 60
	d := c.Step(s.At, &s, line)
	if d.ShowRatio < 0.4 || d.ShowRatio > 0.6 {
		t.Fatalf("show ratio %v, want about 0.5", d.ShowRatio)
	}
	if float64(d.Allow) < 1.6*float64(d.Target-60-10) {
		t.Fatalf("allowance %d for target %d and 60 on site: no-shows not compensated", d.Allow, d.Target)
	}
}

func TestNobodyIsANoShowBeforeAnyoneArrived(t *testing.T) {
	// A spike: the target's 10 are admitted at once and are on their way
	// (no arrival reported yet). They are not no-shows, so the allowance
	// stays within the target instead of twenty times its headroom.
	c, _ := New(cfg(), 10)
	line := Line{}
	var d Decision
	for at := time.Duration(0); at <= 3*time.Second; at += time.Second {
		s := hist(100, 0)
		s.At, s.Window = t0.Add(at), time.Second
		d = c.Step(s.At, &s, line)
		line.AdmittedTotal += d.Allow
	}
	if d.ShowRatio != 1 || line.AdmittedTotal > 10 {
		t.Fatalf("show ratio %v, %d admitted for a target of 10 with nobody arrived yet", d.ShowRatio, line.AdmittedTotal)
	}
}

func TestConfigProblems(t *testing.T) {
	for name, c := range map[string]Config{
		"no target":       {MaxRate: 1},
		"no max rate":     {TargetP95: time.Second},
		"min over max":    {TargetP95: time.Second, MinRate: 2, MaxRate: 1},
		"bad mode":        {TargetP95: time.Second, MaxRate: 1, Mode: "auto"},
		"bad lost":        {TargetP95: time.Second, MaxRate: 1, OnLost: "drop"},
		"target inverted": {TargetP95: time.Second, MaxRate: 1, MinTarget: 5, MaxTarget: 2},
	} {
		if _, err := New(c, 0); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
