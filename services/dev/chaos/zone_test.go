package chaos

import (
	"testing"
	"time"

	"github.com/waitroom/waitroom/topics"
)

// Admissions are back at the rate at the end of the first 2 s window
// holding 80% of the arrivals after the last one under half: after a gap,
// once the window past the gap fills; with no gap, the first window; a
// second's jitter is no dip; a recovery not read 5 s past is not known; a
// flow at half the rate never is.
func TestRateBackAtNeedsTheRateHeld(t *testing.T) {
	at := time.Unix(1000, 0)
	steady := func(from, to time.Duration) []time.Time { // 20 a second
		var ts []time.Time
		for d := from; d < to; d += 50 * time.Millisecond {
			ts = append(ts, at.Add(d))
		}
		return ts
	}
	for _, tc := range []struct {
		name  string
		ts    []time.Time
		until time.Duration
		want  time.Duration
		known bool
	}{
		{"no dip", steady(-2*time.Second, 20*time.Second), 20 * time.Second, 2 * time.Second, true},
		{"gap from 1 s to 8 s", append(steady(-2*time.Second, time.Second), steady(8*time.Second, 20*time.Second)...), 20 * time.Second, 9600 * time.Millisecond, true},
		{"back, not held 5 s", append(steady(-2*time.Second, time.Second), steady(8*time.Second, 12*time.Second)...), 12 * time.Second, 0, false},
		{"half the rate", everyOther(steady(0, 20*time.Second)), 20 * time.Second, 0, false},
		{"a slow second at 10 s", append(steady(-2*time.Second, 10*time.Second), steady(10700*time.Millisecond, 20*time.Second)...), 20 * time.Second, 2 * time.Second, true},
		{"a second gap", append(append(steady(-2*time.Second, time.Second), steady(8*time.Second, 12*time.Second)...), steady(14*time.Second, 25*time.Second)...), 25 * time.Second, 15600 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, known := rateBackAt(tc.ts, at, at.Add(tc.until), 20)
			if known != tc.known || got.Round(100*time.Millisecond) != tc.want {
				t.Errorf("rateBackAt = %s, %v; want %s, %v", got, known, tc.want, tc.known)
			}
		})
	}
}

// The listeners a zone's loss dropped are those whose stream ended within
// 2 s of the kill; each is back when a stream opened after its drop, and
// told when admitted over SSE. The front door is whole at the end of its
// last failed probe.
func TestMeasureZoneCountsTheDroppedListeners(t *testing.T) {
	at := time.Now().Add(-30 * time.Second)
	s := func(d time.Duration) time.Time { return at.Add(d) }
	ld := &load{}
	for _, st := range []state{
		{sse: true, drops: []time.Time{s(100 * time.Millisecond)}, opens: []time.Time{s(-time.Second), s(700 * time.Millisecond)}, via: "sse", outcome: "completed"},
		{sse: true, drops: []time.Time{s(50 * time.Millisecond)}, opens: []time.Time{s(-time.Second)}},                                 // not back, still waiting
		{sse: true, drops: []time.Time{s(5 * time.Second)}, opens: []time.Time{s(-time.Second), s(6 * time.Second)}, via: "sse"},       // another stream's end
		{sse: true, drops: []time.Time{s(-3 * time.Second)}, opens: []time.Time{s(-4 * time.Second), s(-2 * time.Second)}, via: "sse"}, // before the kill
		{sse: false, outcome: "completed"},
	} {
		ld.people = append(ld.people, &person{state: st})
	}
	pr := &frontProbe{results: []probeResult{
		{route: "status", start: s(-time.Second), took: time.Second, outcome: "status: 502"}, // before the kill
		{route: "status", start: s(time.Second), took: 500 * time.Millisecond, outcome: "status: 503"},
		{route: "events", start: s(2 * time.Second), took: 2 * time.Second},
	}}
	tl := &tail{ticks: map[string][]topics.AdmissionEvent{}, tickTimes: map[string][]time.Time{}}
	r := measureZone(ld, tl, pr, at, 20)
	if r.listenersDropped != 2 || r.listenersBack != 1 || r.listenersTold != 1 || r.listenersOpen != 1 {
		t.Errorf("listeners dropped %d, back %d, told %d, open %d; want 2, 1, 1, 1", r.listenersDropped, r.listenersBack, r.listenersTold, r.listenersOpen)
	}
	if r.slowestBack != 700*time.Millisecond {
		t.Errorf("slowest back %s, want 700ms", r.slowestBack)
	}
	if r.probes != 2 || r.failed != 1 || r.frontWhole != 1500*time.Millisecond || r.frontSlowest != 2*time.Second {
		t.Errorf("probes %d, failed %d, whole at %s, slowest %s; want 2, 1, 1.5s, 2s", r.probes, r.failed, r.frontWhole, r.frontSlowest)
	}
	if r.settled(at, at.Add(10*time.Second), time.Now()) {
		t.Error("settled with a dropped listener still waiting and no admissions on the record")
	}
}

func everyOther(ts []time.Time) []time.Time {
	var out []time.Time
	for i := 0; i < len(ts); i += 2 {
		out = append(out, ts[i])
	}
	return out
}

// The zone fault runs when named, and is not in the default list.
func TestZoneFaultOnlyWhenNamed(t *testing.T) {
	for _, sentinel := range []bool{false, true} {
		all, err := pick(nil, sentinel)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range all {
			if f.Name == "zone-a" {
				t.Errorf("sentinel=%v: zone-a in the default list", sentinel)
			}
		}
		named, err := pick([]string{"zone-a"}, sentinel)
		if err != nil || len(named) != 1 || named[0].Name != "zone-a" {
			t.Errorf("sentinel=%v: pick(zone-a) = %v, %v", sentinel, named, err)
		}
	}
}
