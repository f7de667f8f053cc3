package chaos

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	httppprof "net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/waitroom/waitroom/services/dev/cluster"
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
		{"goroutines leaking", []sample{at(0, 50, 40), at(20, 50, 40), at(40, 50, 46), at(60, 50, 52)}, "goroutines"},
		{"goroutines up by a few connections' (within the slack)", []sample{at(0, 50, 40), at(20, 50, 40), at(40, 50, 44), at(60, 50, 47)}, ""},
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

// The live heap is judged like RSS: an hour's slow leak of kept memory fails
// even while RSS stays flat (the GC's headroom hides it), and one reading
// taken mid-backlog does not; a process whose heap is not read (zero, or no
// pprof: a nil map) is not judged on it.
func TestGrowthJudgesTheLiveHeap(t *testing.T) {
	hour := func(heap func(min int) int64) []sample {
		var ss []sample
		for m := 1; m <= 60; m++ {
			ss = append(ss, sample{At: time.Duration(m) * time.Minute, RSS: map[string]int64{"consumer-1": 100 << 10},
				Goroutines: map[string]int64{"consumer-1": 60}, Heap: map[string]int64{"consumer-1": heap(m)}})
		}
		return ss
	}
	for _, tc := range []struct {
		name    string
		samples []sample
		bad     string
	}{
		{"flat", hour(func(int) int64 { return 20 << 20 }), ""},
		{"an hour's slow leak of live heap", hour(func(m int) int64 { return 20<<20 + int64(m)<<17 }), "live heap"},
		{"one reading 40% up mid-backlog", hour(func(m int) int64 { return map[bool]int64{true: 28 << 20, false: 20 << 20}[m == 58] }), ""},
		{"not read", hour(func(int) int64 { return 0 }), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := growth(tc.samples, 1.1, nil)
			if tc.bad == "" && len(bad) > 0 || tc.bad != "" && (len(bad) != 1 || !strings.Contains(bad[0], tc.bad)) {
				t.Fatalf("growth = %q, want one about %q", bad, tc.bad)
			}
		})
	}
}

// The meter reads HeapAlloc from a live heap profile: this process's own,
// served by net/http/pprof as the services serve theirs.
func TestHeapAllocOfAHeapProfile(t *testing.T) {
	var b bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h := readHeapStats(b.Bytes())
	if h.Alloc <= 0 || h.Alloc > int64(ms.Sys) || h.InUse < h.Alloc || h.InUse > int64(ms.Sys) {
		t.Fatalf("HeapAlloc and memory in use of this process's heap profile: %+v bytes (Sys %d): want 0 < HeapAlloc <= in use <= Sys", h, ms.Sys)
	}
	if h := readHeapStats([]byte("heap profile: 0: 0 [0: 0] @ heap/1048576\n# Sys = 100\n# HeapIdle = 50\n")); h != (heapStats{}) {
		t.Fatalf("heap of a profile without a HeapAlloc: %+v", h)
	}
	if h := readHeapStats([]byte("# HeapAlloc = 700\n# Sys = 4000\n# HeapIdle = 500\n# HeapReleased = 200\n")); h != (heapStats{Alloc: 700, InUse: 3500}) {
		t.Fatalf("heap of a profile with Sys 4000 and 500 idle: %+v, want 3500 in use", h)
	}
}

// The meter reads a service's live heap from its pprof listener, as
// pkg/app/service serves it (WR_PPROF_ADDR), and the CSV it writes reads back
// with the heap beside RSS and goroutines.
func TestLiveHeapFromAPprofListener(t *testing.T) {
	p := pprofProc(t, "consumer-1")
	h, prof := liveHeap(p)
	n := h.Alloc
	if n <= 0 {
		t.Fatalf("live heap of this process through its pprof listener: %d bytes", n)
	}
	csv := filepath.Join(t.TempDir(), "meter.csv")
	// The profile is kept beside the CSV, gzipped, and reads back whole.
	m := &meter{csv: csv}
	m.keepProfile(p.Name, 90*time.Second, prof)
	zf, err := os.Open(filepath.Join(filepath.Dir(csv), "heap", "consumer-1-001.txt.gz"))
	if err != nil {
		t.Fatalf("the kept heap profile: %v", err)
	}
	zr, err := gzip.NewReader(zf)
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(zr)
	zf.Close()
	if err != nil || !bytes.Equal(back, prof) || !bytes.HasPrefix(back, []byte("heap profile: ")) {
		t.Fatalf("kept profile read back: %d bytes (%v), want the %d read, a heap profile", len(back), err, len(prof))
	}
	body := "minutes,process,rss_kib,goroutines,heap_bytes,kept_kib,calm\n1.00,consumer-1,90000,60," + strconv.FormatInt(n, 10) + ",40000,1\n"
	if err := os.WriteFile(csv, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	got, _, err := readMeterCSV(csv)
	if err != nil || len(got) != 1 || got[0].Heap["consumer-1"] != n || got[0].RSS["consumer-1"] != 90000 || got[0].Kept["consumer-1"] != 40000 || !got[0].Calm {
		t.Fatalf("read back %+v, %v; want the heap %d and kept 40000 beside RSS 90000, calm", got, err, n)
	}
}

// A process whose live heap is read is judged on it, not on its raw RSS nor
// its runtime's memory in use: RSS and in-use memory swinging while the
// live heap is flat passes; a slow leak of the live heap fails even while
// RSS looks flat; a process without a heap reading is still judged on RSS.
func TestGrowthJudgesTheLiveHeapInsteadOfRSS(t *testing.T) {
	hour := func(rss, heap func(min int) int64) []sample {
		var ss []sample
		for m := 1; m <= 60; m++ {
			s := sample{At: time.Duration(m) * time.Minute, RSS: map[string]int64{"consumer-1": rss(m), "door": 30 << 10},
				Goroutines: map[string]int64{"consumer-1": 60, "door": 10}, Heap: map[string]int64{}, Kept: map[string]int64{}}
			if h := heap(m); h >= 0 {
				s.Heap["consumer-1"] = h
				s.Kept["consumer-1"] = rss(m) / 2
			}
			ss = append(ss, s)
		}
		return ss
	}
	flat := func(int) int64 { return 60 << 10 }
	swing := func(m int) int64 { return int64(96+105*(m/8%2)) << 10 } // 96 and 201 MiB by turns of eight minutes
	flatHeap := func(int) int64 { return 20 << 20 }
	for _, tc := range []struct {
		name      string
		rss, heap func(int) int64
		bad       string
	}{
		{"RSS and in-use swinging, heap flat", swing, flatHeap, ""},
		{"RSS flat, heap leaking", flat, func(m int) int64 { return 20<<20 + int64(m)<<18 }, "live heap"},
		{"the same swing without a heap reading: judged on RSS, fails", swing, func(int) int64 { return -1 }, "RSS KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := growth(hour(tc.rss, tc.heap), 1.1, nil)
			if tc.bad == "" && len(bad) > 0 || tc.bad != "" && (len(bad) != 1 || !strings.Contains(bad[0], tc.bad)) {
				t.Fatalf("growth = %q, want one about %q", bad, tc.bad)
			}
		})
	}
}

// With calm readings (Options.Calm) growth compares only them: a process
// whose memory swings with the faults (high in every reading taken
// mid-fault, among them the last five) passes when its calm readings are
// flat, and fails when they grow; calm readings that miss the third or the
// end are refused, not passed.
func TestGrowthJudgesCalmReadingsOnly(t *testing.T) {
	hour := func(calm func(m int) bool, heap func(m int, calm bool) int64) []sample {
		var ss []sample
		for m := 1; m <= 62; m++ {
			c := calm(m)
			h := heap(m, c)
			ss = append(ss, sample{At: time.Duration(m) * time.Minute, RSS: map[string]int64{"scheduler-1": h >> 10 * 3},
				Goroutines: map[string]int64{"scheduler-1": 50}, Heap: map[string]int64{"scheduler-1": h}, Kept: map[string]int64{"scheduler-1": h >> 10 * 2}, Calm: c})
		}
		return ss
	}
	calmAt := func(m int) bool { return m == 19 || m == 20 || m >= 59 } // as the soak's calm windows give
	swing := func(m int, calm bool) int64 {
		switch {
		case calm:
			return 20 << 20
		case m >= 55:
			return 50 << 20 // the last faults hold the most
		}
		return int64(20+30*(1-m%2)) << 20 // 20 or 50 MiB by turns, whatever a fault holds at the reading
	}
	leak := func(m int, calm bool) int64 { return int64(20<<20 + m<<18) } // +256 KiB a minute: x1.5 from 20 to 62
	for _, tc := range []struct {
		name string
		calm func(int) bool
		heap func(int, bool) int64
		bad  string
	}{
		{"swinging mid-fault, flat when calm", calmAt, swing, ""},
		{"flat when calm but for one reading at the end", calmAt, func(m int, calm bool) int64 {
			if m == 60 {
				return 35 << 20 // work in flight at that one reading: the floor is the other's
			}
			return swing(m, calm)
		}, ""},
		{"leaking, calm or not", calmAt, leak, "live heap"},
		{"the swing judged on every reading", func(int) bool { return false }, swing, "live heap"},
		{"no calm reading by the third", func(m int) bool { return m >= 59 }, swing, "no calm memory reading"},
		{"no calm reading at the end", func(m int) bool { return m == 19 || m == 20 }, swing, "no calm memory reading at the end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := growth(hour(tc.calm, tc.heap), 1.1, nil)
			if tc.bad == "" && len(bad) > 0 || tc.bad != "" && !slices.ContainsFunc(bad, func(b string) bool { return strings.Contains(b, tc.bad) }) {
				t.Fatalf("growth = %q, want one about %q", bad, tc.bad)
			}
		})
	}
}

// What a sync.Pool holds survives one collection and is freed by the next:
// the meter collects twice, so 64 MiB pooled just before a reading is not
// read as kept. (With one collection, as before, the reading held it.)
func TestLiveHeapLeavesOutWhatPoolsHold(t *testing.T) {
	p := pprofProc(t, "scheduler-1")
	before, _ := liveHeap(p)
	const pooled = 64 << 20
	var pool sync.Pool
	for range 16 {
		pool.Put(make([]byte, pooled/16))
	}
	after, _ := liveHeap(p)
	if before.Alloc <= 0 || after.Alloc <= 0 {
		t.Fatalf("live heap not read: %d, %d", before.Alloc, after.Alloc)
	}
	// One collection leaves at least a quarter of it in the victim cache
	// (16 MiB of the 64 measured here).
	if after.Alloc-before.Alloc > pooled/8 {
		t.Fatalf("live heap %d MiB with 64 MiB pooled, %d MiB before: what a pool holds was read as kept", after.Alloc>>20, before.Alloc>>20)
	}
	runtime.KeepAlive(&pool)
}

// The end of a calm soak waits for calm readings taken after it began to
// wait (readings before do not count, nor do readings that are not calm),
// and gives up at its bound.
func TestAwaitCalmWaitsForNewCalmReadings(t *testing.T) {
	m := &meter{samples: []sample{{Calm: true}, {Calm: true}}}
	go func() {
		for _, c := range []bool{false, true, false, true} {
			time.Sleep(30 * time.Millisecond)
			m.mu.Lock()
			m.samples = append(m.samples, sample{Calm: c})
			m.mu.Unlock()
		}
	}()
	if n := m.awaitCalm(context.Background(), 2, 5*time.Second); n != 2 {
		t.Fatalf("calm readings awaited: %d, want 2", n)
	}
	m.mu.Lock()
	took := len(m.samples)
	m.mu.Unlock()
	if took != 6 {
		t.Fatalf("returned after %d readings, want the 6th (the second new calm one)", took)
	}
	start := time.Now()
	if n := m.awaitCalm(context.Background(), 1, 200*time.Millisecond); n != 0 || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("with no new reading: %d calm after %s, want 0 at the bound", n, time.Since(start))
	}
}

// pprofProc is a process named name whose pprof listener is this test
// process's own, as pkg/app/service serves a service's (WR_PPROF_ADDR).
func pprofProc(t *testing.T, name string) *cluster.Proc {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", httppprof.Index)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &cluster.Proc{Name: name, PprofAddr: strings.TrimPrefix(srv.URL, "http://")}
}

// A bounded pool filling in one step is not a leak, and the goroutines a
// server has for its clients' connections dip between readings: with the
// calm windows read four times an interval (meter.next), the floors come
// from eight readings and a pool's step stays within growthSlack, while a
// heap that grows past it fails. With two calm readings a window, as the
// meter took before, one dip at the third decides.
func TestGrowthLeavesAPoolsStepAndConnectionDipsAlone(t *testing.T) {
	const mib = 1 << 20
	run := func(reads int, heap func(at time.Duration) int64, goroutines func(i int) int64) []sample {
		var ss []sample
		add := func(at time.Duration, calm bool) {
			ss = append(ss, sample{At: at, RSS: map[string]int64{"notifier-2": 40 << 10}, Calm: calm,
				Goroutines: map[string]int64{"notifier-2": goroutines(len(ss))}, Heap: map[string]int64{"notifier-2": heap(at)}})
		}
		for m := 1; m <= 62; m++ {
			calm := m == 19 || m == 20 || m >= 59
			if !calm {
				add(time.Duration(m)*time.Minute, false)
				continue
			}
			for i := range reads {
				add(time.Duration(m)*time.Minute+time.Duration(i)*time.Minute/time.Duration(reads), true)
			}
		}
		return ss
	}
	step := func(by int64) func(time.Duration) int64 {
		return func(at time.Duration) int64 {
			if at >= 24*time.Minute {
				return 49*mib/10 + by // a slow Redis made the pool open its connections, kept since
			}
			return 49 * mib / 10
		}
	}
	flat := func(time.Duration) int64 { return 49 * mib / 10 }
	// 70 goroutines, 41 at every seventh reading (the front's idle
	// connections closed at that moment).
	dips := func(i int) int64 { return map[bool]int64{true: 41, false: 70}[i%7 == 3] }
	for _, tc := range []struct {
		name       string
		reads      int
		heap       func(time.Duration) int64
		goroutines func(int) int64
		bad        string
	}{
		{"a pool's 1.3 MiB step on a 4.9 MiB heap", calmReads, step(13 * mib / 10), dips, ""},
		{"2.5 MiB more, kept", calmReads, step(25 * mib / 10), dips, "live heap"},
		{"connection dips read four times an interval", calmReads, flat, dips, ""},
		{"goroutines leaking past the dips", calmReads, flat, func(i int) int64 { return dips(i) + int64(i)/4 }, "goroutines"},
		{"two calm readings a window: a dip at the third decides", 1, flat, func(i int) int64 {
			return map[bool]int64{true: 41, false: 70}[i == 18]
		}, "goroutines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := growth(run(tc.reads, tc.heap, tc.goroutines), 1.1, nil)
			if tc.bad == "" && len(bad) > 0 || tc.bad != "" && (len(bad) != 1 || !strings.Contains(bad[0], tc.bad)) {
				t.Fatalf("growth = %q, want one about %q", bad, tc.bad)
			}
		})
	}
}

// The meter reads calmReads times an interval once the nemesis has been
// quiet for calmAfter, and once an interval otherwise (or without a
// nemesis).
func TestMeterReadsCalmWindowsMoreOften(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		faults *faultClock
		want   time.Duration
	}{
		{"no nemesis", nil, time.Minute},
		{"a fault active", &faultClock{active: 1, quietFrom: now.Add(-time.Hour)}, time.Minute},
		{"quiet for less than calmAfter", &faultClock{quietFrom: now.Add(-calmAfter / 2)}, time.Minute},
		{"quiet for calmAfter", &faultClock{quietFrom: now.Add(-calmAfter - time.Second)}, time.Minute / calmReads},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &meter{faults: tc.faults}
			if got := m.next(time.Minute); got != tc.want {
				t.Fatalf("next = %s, want %s", got, tc.want)
			}
		})
	}
}
