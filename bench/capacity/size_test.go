package main

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A measured file whose figures are round: every per-unit cost below can be
// worked out by hand from it.
const measured = `# phase wall_s units api consumer scheduler notifier redis kafka
idle 10 0 0.1 0.1 0.2 0.1 0.1 0.3
register 10 100000 4.1 1.1 0.2 0.5 2.1 3.3
status 10 200000 4.1 0.1 0.2 0.1 0.3 0.3
streams 20 2000 0.2 0.2 0.4 0.6 0.4 0.6
updates 10 5000 0.1 0.3 0.4 0.4 0.5 0.5
admitted-streams 10 1000 0.1 0.3 0.4 0.4 0.5 0.5
admit 10 2000 0.1 0.3 0.4 0.2 0.3 0.5
`

func TestSizeFromMeasured(t *testing.T) {
	file := filepath.Join(t.TempDir(), "measured.txt")
	if err := os.WriteFile(file, []byte(measured), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := readMeasured(file)
	if err != nil {
		t.Fatal(err)
	}
	c := netCosts(m)
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %g, want %g", what, got, want)
		}
	}
	// (4.1 − 0.01 cores × 10 s) / 100,000 = 40 µs; redis (2.1 − 0.1) / 100,000 = 20 µs.
	near("api per registration", c.register["api"], 40e-6)
	near("redis per registration", c.register["redis"], 20e-6)
	near("api per status read", c.status["api"], 20e-6)
	near("scheduler per admitted", c.admit["scheduler"], 100e-6)          // (0.4 − 0.2) / 2,000
	near("notifier per stream-second", c.streamSecond["notifier"], 10e-6) // (0.6 − 0.2) / (2,000 × 20 s)
	near("notifier per admitted", c.admit["notifier"], 50e-6)             // (0.2 − 0.1) / 2,000
	near("notifier per update", c.upd["notifier"], 50e-6)                 // ((0.4 − 0.1) − 1,000 × 50 µs) / 5,000
	near("redis per update", c.upd["redis"], 60e-6)                       // ((0.5 − 0.1) − 1,000 × 100 µs) / 5,000

	s := sale{people: 600_000, window: time.Minute, poll: 5 * time.Second, share: 0.5, admit: 1000, positionGap: time.Second}
	l := s.load()
	near("registrations/s", l.regs, 10_000)
	near("waiting", l.waiting, 540_000)
	near("streams", l.streams, 270_000)
	near("status reads/s", l.reads, 54_000)
	near("updates/s", l.updates, 270_500)
	b := busy(c, l)
	near("api cores", b["api"], 0.01+10_000*40e-6+54_000*20e-6)
	near("notifier cores", b["notifier"], 0.01+1000*50e-6+270_000*10e-6+270_500*50e-6)
	near("scheduler cores", b["scheduler"], 0.02+1000*100e-6)
}
