package chaos

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/services/dev/cluster"
	"github.com/waitroom/waitroom/topics"
)

var replicasOfACluster = Replicas{APIs: 2, Consumers: 2, Schedulers: 3, Notifiers: 2}

// WR_CHAOS_SEED replays a run: the schedule is a function of the seed alone.
func TestScheduleIsAFunctionOfItsSeed(t *testing.T) {
	a := Schedule(42, 2*time.Minute, replicasOfACluster)
	b := Schedule(42, 2*time.Minute, replicasOfACluster)
	if len(a) == 0 || !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 42 gave two schedules:\n%v\n%v", a, b)
	}
	if c := Schedule(43, 2*time.Minute, replicasOfACluster); reflect.DeepEqual(a, c) {
		t.Fatal("seeds 42 and 43 gave the same schedule")
	}
}

// Whatever the seed: faults overlap but never more than three at once, two
// never share a link, one kind of process never loses two replicas' links
// at once (a partition isolates one replica), and every fault ends within
// the nemesis.
func TestScheduleBounds(t *testing.T) {
	const length = 90 * time.Second
	for seed := int64(0); seed < 300; seed++ {
		steps := Schedule(seed, length, replicasOfACluster)
		if len(steps) < 10 {
			t.Fatalf("seed %d: %d faults in %s", seed, len(steps), length)
		}
		if n := overlapping(steps); n > maxOverlap || n < 2 {
			t.Fatalf("seed %d: %d faults at once", seed, n)
		}
		for i, s := range steps {
			if s.Kind == Failover {
				t.Fatalf("seed %d: a failover drawn with a single Redis", seed)
			}
			if s.At < 0 || s.For < time.Second || s.At+s.For > length {
				t.Fatalf("seed %d: %v outside the nemesis", seed, s)
			}
			if s.Kind == Slow && (s.Toxics.Latency-s.Toxics.Jitter < 50*time.Millisecond || s.Toxics.Latency+s.Toxics.Jitter > 500*time.Millisecond) {
				t.Fatalf("seed %d: %v outside 50–500 ms", seed, s)
			}
			for _, o := range steps[:i] {
				if o.At+o.For <= s.At {
					continue // over before s starts
				}
				sameLink := o.Proc == s.Proc && o.Link == s.Link
				schedRedis := func(x Step) bool {
					return x.Proc == "leader" || (strings.HasPrefix(x.Proc, "scheduler") && x.Link == "redis")
				}
				class := func(x Step) string { return strings.SplitN(x.Proc, "-", 2)[0] }
				if sameLink || (schedRedis(o) && schedRedis(s)) || (o.blocking() && s.blocking() && class(o) == class(s)) {
					t.Fatalf("seed %d: %v and %v at once", seed, o, s)
				}
			}
		}
	}
}

// make chaos-ci runs the nemesis of a fixed seed: it must hold at least one
// partition, one slow link and overlapping faults, and it does hold more
// (an api cut from Kafka, a stalled leader, a timeout, resets, slow readers,
// an asymmetric partition holding answers, packet loss, a full Redis, a
// Sentinel failover to a replica that missed writes).
func TestTheCISeedHasAPartitionASlowLinkAndOverlaps(t *testing.T) {
	mk, err := os.ReadFile("../../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^chaos-ci:.*\n\t.*WR_CHAOS_SEED=(\d+).*WR_CHAOS_NEMESIS=(\S+)`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("make chaos-ci sets no WR_CHAOS_SEED and WR_CHAOS_NEMESIS")
	}
	seed, _ := strconv.ParseInt(string(m[1]), 10, 64)
	length, err := time.ParseDuration(string(m[2]))
	if err != nil {
		t.Fatal(err)
	}
	r := replicasOfACluster
	if !strings.Contains(string(m[0]), "WR_CHAOS_SENTINEL=true") {
		t.Fatal("make chaos-ci runs Redis without Sentinel: no failover")
	}
	r.Redis = 2
	steps := Schedule(seed, length, r)
	has := map[string]bool{}
	for _, s := range steps {
		has[s.Kind] = true
		if s.Kind == Partition && s.Link == "kafka" && strings.HasPrefix(s.Proc, "api") {
			has["api cut from Kafka"] = true
		}
		if s.Kind == OneWay && s.Dir == cluster.Down {
			has["answers held"] = true
		}
	}
	for _, want := range []string{Partition, Slow, LeaderStall, Timeout, ResetPeer, "api cut from Kafka", OneWay, "answers held", Loss, OOM, SlowReaders, Failover} {
		if !has[want] {
			t.Errorf("the CI nemesis (seed %d, %s) has no %s", seed, length, want)
		}
	}
	if n := overlapping(steps); n < 2 {
		t.Errorf("the CI nemesis has at most %d fault at once", n)
	}
}

// A broken build is caught mid-run: a history in which a second scheduler
// admits the line's head again (what a leader with its fencing switched off
// does after a stall), or admits past someone, is a violation as soon as
// the record shows it, while admissions read ahead of the registrations they
// admit (two topics read side by side) are not.
func TestTheWatchCatchesADoubleAdmissionMidRun(t *testing.T) {
	reg := func(user, tok string) topics.RegistrationEvent {
		return topics.RegistrationEvent{Kind: topics.KindRegister, ItemID: "i", UserID: user, TokenID: tok}
	}
	tick := func(exp int64, toks ...string) topics.AdmissionEvent {
		e := topics.AdmissionEvent{ItemID: "i", Admitted: toks}
		for range toks {
			e.ExpiresAt = append(e.ExpiresAt, exp)
		}
		return e
	}
	line := []topics.RegistrationEvent{reg("a", "t1"), reg("b", "t2"), reg("c", "t3")}
	for _, tc := range []struct {
		name                string
		regs                []topics.RegistrationEvent
		ticks               []topics.AdmissionEvent
		doubled, outOfOrder int
	}{
		{"in order", line, []topics.AdmissionEvent{tick(10, "t1"), tick(11, "t2")}, 0, 0},
		{"admissions read ahead of their registrations", line[:1], []topics.AdmissionEvent{tick(10, "t1"), tick(11, "t2", "t3")}, 0, 0},
		{"the stalled leader's late tick admits the head again (fencing off)", line, []topics.AdmissionEvent{tick(10, "t1"), tick(11, "t2"), tick(12, "t1")}, 1, 0},
		{"past someone in line", line, []topics.AdmissionEvent{tick(10, "t1"), tick(11, "t3")}, 0, 1},
		{"past someone, the record read only so far", line[:2], []topics.AdmissionEvent{tick(10, "t2")}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := &tail{regs: map[string][]topics.RegistrationEvent{"i": tc.regs}, ticks: map[string][]topics.AdmissionEvent{"i": tc.ticks}}
			w := &watch{}
			var v verdict
			tl.order(&v, true)
			w.add(v, time.Now())
			w.add(verdict{}, time.Now()) // a later clean check does not erase it
			got := w.v
			if got.Doubled != tc.doubled || got.OutOfOrder != tc.outOfOrder {
				t.Fatalf("doubled %d, out of order %d; want %d, %d (%v)", got.Doubled, got.OutOfOrder, tc.doubled, tc.outOfOrder, got.Notes)
			}
			if (tc.doubled+tc.outOfOrder > 0) == got.ok() {
				t.Fatalf("verdict ok=%v with %d violations", got.ok(), tc.doubled+tc.outOfOrder)
			}
		})
	}
}

// A client's own history: the server must never tell it a position larger
// than one it told it before.
func TestClientToldALargerPositionIsCaught(t *testing.T) {
	l := &load{}
	steady, back := &person{state: state{item: "i", user: "a"}}, &person{state: state{item: "i", user: "b"}}
	l.people = []*person{steady, back}
	for _, pos := range []int64{9, 7, 7, 0, 3} { // 0: an answer without a position
		steady.told(pos, "status")
	}
	for _, pos := range []int64{9, 5, 6} {
		back.told(pos, "sse")
	}
	var v verdict
	l.regressions(&v)
	if v.Regressed != 1 {
		t.Fatalf("regressed %d (%v), want 1: b was told 6 after 5", v.Regressed, v.Notes)
	}
	if (Row{Verdict: v, StrictPositions: true}).OK() {
		t.Fatal("a client told a larger position passed a strict run")
	}
	if !(Row{Verdict: v}).OK() {
		t.Fatal("a client told a larger position failed a run that only reports it")
	}
}

// The clock skews replay with the seed, stay within the bound, and set
// the schedulers apart from each other.
func TestSkewsAreAFunctionOfTheSeedWithinTheBound(t *testing.T) {
	const most = 2 * time.Second
	a, b := Skews(8, most, replicasOfACluster), Skews(8, most, replicasOfACluster)
	if len(a) != 7 || !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 8 gave %v and %v", a, b)
	}
	if reflect.DeepEqual(a, Skews(9, most, replicasOfACluster)) {
		t.Fatal("seeds 8 and 9 gave the same skews")
	}
	for seed := int64(0); seed < 100; seed++ {
		s := Skews(seed, most, replicasOfACluster)
		for name, d := range s {
			if d < -most || d > most {
				t.Fatalf("seed %d: %s skewed %s, beyond ±%s", seed, name, d, most)
			}
		}
		if _, ok := s["consumer-1"]; ok {
			t.Fatalf("seed %d: a consumer's clock skewed", seed)
		}
	}
	if Skews(8, 0, replicasOfACluster) != nil {
		t.Fatal("no bound, yet skews")
	}
}

// The failover needs Redis behind Sentinel: the default list has it only
// then, and naming it without Sentinel is refused before a cluster starts.
func TestTheFailoverFaultNeedsSentinel(t *testing.T) {
	has := func(fs []Fault) bool {
		return slices.ContainsFunc(fs, func(f Fault) bool { return f.Name == Failover })
	}
	single, err := pick(nil, false)
	if err != nil || has(single) {
		t.Fatalf("default faults with a single Redis: %v (failover: %v)", err, has(single))
	}
	sentinel, err := pick(nil, true)
	if err != nil || !has(sentinel) || len(sentinel) != len(single)+1 {
		t.Fatalf("default faults behind Sentinel: %v (%d, failover: %v)", err, len(sentinel), has(sentinel))
	}
	if _, err := pick([]string{Failover}, false); err == nil {
		t.Fatal("redis-failover named with a single Redis was accepted")
	}
}

// The soak's calm windows: no step of the schedule is active inside one,
// a step running into one is cut at its start, the steps outside are
// untouched, and the result is still a function of the seed.
func TestWithCalmKeepsTheWindowsClear(t *testing.T) {
	reps := Replicas{APIs: 2, Consumers: 2, Schedulers: 3, Notifiers: 2, Redis: 1}
	all := Schedule(7, 60*time.Minute, reps)
	w := calmWindows(60*time.Minute, 3*time.Minute)
	if len(w) != 2 || w[0] != [2]time.Duration{17 * time.Minute, 20 * time.Minute} || w[1] != [2]time.Duration{57 * time.Minute, 60 * time.Minute} {
		t.Fatalf("calm windows of an hour, 3 min each: %v", w)
	}
	calm := WithCalm(all, w...)
	if again := WithCalm(Schedule(7, 60*time.Minute, reps), w...); !slices.Equal(calm, again) {
		t.Fatal("the same seed gave another calm schedule")
	}
	cut := 0
	for _, s := range calm {
		for _, win := range w {
			if s.At < win[1] && s.At+s.For > win[0] {
				t.Fatalf("%s is active inside the calm window %v", s, win)
			}
		}
		if !slices.Contains(all, s) {
			cut++
		}
	}
	inside := 0
	for _, s := range all {
		for _, win := range w {
			if s.At < win[1] && s.At+s.For > win[0] {
				inside++
			}
		}
	}
	if inside == 0 || len(calm) >= len(all) || len(calm) < len(all)-inside || cut == 0 {
		t.Fatalf("of %d steps, %d touch a window: %d kept, %d of them cut; want the others untouched and at least one cut", len(all), inside, len(calm), cut)
	}
	if calmWindows(60*time.Minute, 0) != nil || calmWindows(5*time.Minute, 3*time.Minute) != nil {
		t.Fatal("no calm, or a nemesis too short for it, must give no window")
	}
}

// The fault clock the meter reads: nothing is calm before the first step
// nor while one is active, and the quiet is counted from the last end.
func TestFaultClockCountsQuietFromTheLastStepsEnd(t *testing.T) {
	var f faultClock
	t0 := time.Now()
	if q := f.quietFor(t0); q != 0 {
		t.Fatalf("quiet before any step: %s", q)
	}
	f.begin()
	f.begin()
	f.end(t0)
	if q := f.quietFor(t0.Add(time.Minute)); q != 0 {
		t.Fatalf("quiet with a step still active: %s", q)
	}
	f.end(t0.Add(10 * time.Second))
	if q := f.quietFor(t0.Add(70 * time.Second)); q != time.Minute {
		t.Fatalf("quiet 60 s after the last step ended: %s", q)
	}
	var none *faultClock
	none.begin()
	none.end(t0)
	if none.quietFor(t0) != 0 {
		t.Fatal("a nil clock must never be calm")
	}
}
