package chaos

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/waitroom/waitroom/services/dev/cluster"
)

// sample is one reading of every process: its resident memory and, for a
// Go service, its goroutines and its live heap.
type sample struct {
	At         time.Duration // since the load started
	RSS        map[string]int64
	Goroutines map[string]int64
	// Heap is the bytes a Go service's heap holds right after a forced
	// collection (its pprof's HeapAlloc with gc=1): what it keeps, whatever
	// the GC's headroom (GOGC) lets RSS float above it. Nil when not read.
	Heap map[string]int64
	// Kept is the memory the Go runtime holds in use right after that
	// forced collection, in KiB: Sys - HeapIdle (the heap's spans in use,
	// stacks, and the runtime's own structures), every figure of one
	// MemStats read, so no timing between two readings skews it (RSS less
	// the free pages, read a moment apart, did: readings of 2 MiB beside an
	// RSS of 100). It leaves out GOGC=400's headroom, which stays resident
	// between collections and swings with the heap live at the last one.
	// Nil when the heap was not read.
	Kept map[string]int64
	// Calm: no nemesis step was active for calmAfter before the reading,
	// nor during it (Options.Calm): growth judges only such readings when
	// there are any.
	Calm bool
}

// calmAfter is how long after the last nemesis step ended a reading counts
// as calm: long enough for the links' held requests to be answered, the
// pools' dead connections replaced and the backlog applied (the nemesis
// recovers within seconds: RELIABILITY.md).
const calmAfter = time.Minute

// meter reads every process's RSS (/proc/PID/status), goroutines (the
// go_goroutines of its /metrics) and, for a service with a pprof listener
// (cluster.Options.Pprof), live heap every interval, prints a line per
// reading and appends it to a CSV file: the soak's memory curve.
type meter struct {
	c     *cluster.Cluster
	out   io.Writer
	csv   string
	start time.Time
	// faults, when set, tells how long the nemesis has been calm: each
	// reading is marked calm or not (sample.Calm).
	faults *faultClock

	mu      sync.Mutex
	samples []sample
}

func (m *meter) run(ctx context.Context, every time.Duration) {
	if f, err := os.Create(m.csv); err == nil {
		fmt.Fprintln(f, "minutes,process,rss_kib,goroutines,heap_bytes,kept_kib,calm")
		f.Close()
	}
	for sleepCtx(ctx, m.next(every)) {
		s := m.read()
		m.mu.Lock()
		m.samples = append(m.samples, s)
		m.mu.Unlock()
		var line []string
		f, _ := os.OpenFile(m.csv, os.O_APPEND|os.O_WRONLY, 0o644)
		for _, p := range m.c.All() {
			line = append(line, fmt.Sprintf("%s %d MiB/%d/%d MiB/%d MiB", p.Name, s.RSS[p.Name]>>10, s.Goroutines[p.Name], s.Heap[p.Name]>>20, s.Kept[p.Name]>>10))
			if f != nil {
				fmt.Fprintf(f, "%.2f,%s,%d,%d,%d,%d,%d\n", s.At.Minutes(), p.Name, s.RSS[p.Name], s.Goroutines[p.Name], s.Heap[p.Name], s.Kept[p.Name], b2i(s.Calm))
			}
		}
		if f != nil {
			f.Close()
		}
		calm := ""
		if s.Calm {
			calm = " (calm)"
		}
		fmt.Fprintf(m.out, "soak: +%s%s rss/goroutines/live heap/in use: %s\n", s.At.Round(time.Second), calm, strings.Join(line, ", "))
	}
}

// calmReads is how many readings the meter takes an interval while the
// nemesis is calm: a calm window's floor (growth) is then the least of
// eight readings, not of two, and the goroutines a server has for its
// clients' open connections (tens, opened and closed between readings) are
// at their fewest in one of them at either end.
const calmReads = 4

// next is how long the meter waits for its next reading: every, or
// every/calmReads while the nemesis has been calm for calmAfter.
func (m *meter) next(every time.Duration) time.Duration {
	if m.faults != nil && m.faults.quietFor(time.Now()) >= calmAfter {
		return every / calmReads
	}
	return every
}

func (m *meter) read() sample {
	began := time.Now()
	s := sample{At: time.Since(m.start), RSS: map[string]int64{}, Goroutines: map[string]int64{}, Heap: map[string]int64{}, Kept: map[string]int64{}}
	cl := &http.Client{Timeout: 2 * time.Second}
	for _, p := range m.c.All() {
		var h heapStats
		if p.PprofAddr != "" {
			var prof []byte
			h, prof = liveHeap(p)
			s.Heap[p.Name] = h.Alloc
			m.keepProfile(p.Name, s.At, prof)
		}
		if h.Alloc > 0 {
			s.Kept[p.Name] = h.InUse >> 10
		}
		if pid := p.PID(); pid > 0 {
			s.RSS[p.Name] = rssKiB(pid)
		}
		if p.Addr == "" {
			continue
		}
		resp, err := cl.Get("http://" + p.Addr + "/metrics")
		if err != nil {
			continue
		}
		if n, ok := prefixedInt(resp.Body, "go_goroutines "); ok {
			s.Goroutines[p.Name] = n
		}
		resp.Body.Close()
	}
	// Calm throughout: quiet since calmAfter before the reading began.
	s.Calm = m.faults != nil && m.faults.quietFor(time.Now()) >= calmAfter+time.Since(began)
	return s
}

// endCalmReadings is how many calm readings the end of a calm soak waits
// for: as many as a calm window gives a third of the way in (its last two
// minutes at calmReads an interval).
const endCalmReadings = 2 * calmReads

// awaitCalm waits, the load still running, until the meter has taken n calm
// readings from now on, or most has passed or ctx ended; it returns how many
// it took. The nemesis is over when its last step ends, which in a calm
// soak is at the start of the end's calm window, a minute or more before
// any reading there is calm.
func (m *meter) awaitCalm(ctx context.Context, n int, most time.Duration) int {
	m.mu.Lock()
	from := len(m.samples)
	m.mu.Unlock()
	calm := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		c := 0
		for _, s := range m.samples[from:] {
			if s.Calm {
				c++
			}
		}
		return c
	}
	for end := time.Now().Add(most); ; {
		if c := calm(); c >= n || !time.Now().Before(end) || !sleepCtx(ctx, 100*time.Millisecond) {
			return calm()
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// keepProfile writes a heap profile read at at, gzipped, beside the CSV
// (heap/NAME-MMM.txt.gz, MMM the whole minutes since the load started), so
// what a process held at a high reading can be told from a low one with
// `go tool pprof -sample_index=inuse_space`. Nothing is written for an
// empty profile; a failed write is left out (the reading stands).
func (m *meter) keepProfile(name string, at time.Duration, prof []byte) {
	if len(prof) == 0 {
		return
	}
	dir := filepath.Join(filepath.Dir(m.csv), "heap")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%03d.txt.gz", name, int(at.Minutes()))))
	if err != nil {
		return
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	if _, err := zw.Write(prof); err == nil {
		zw.Close()
	}
}

// heapStats is what a debug=1 heap profile says of the heap, in bytes.
type heapStats struct {
	Alloc int64 // HeapAlloc: the live heap, right after the profile's forced collection
	InUse int64 // Sys - HeapIdle: what the runtime holds in use (see sample.Kept)
}

// liveHeap reads p's heap profile taken after two forced collections
// (/debug/pprof/heap?gc=1, then again with debug=1): zero when it cannot be
// read. Two, because what a sync.Pool holds survives one collection (its
// victim cache) and is freed by the next: the Kafka client's compressors
// (flate, lz4: megabytes each), the HTTP servers' gzip writers and buffers
// are pooled, and how many a service holds after one collection is how
// busy it was just before, not what it keeps (soak 2026-11-26: a
// scheduler's 25 MiB live heap was 62% pooled compressors). The pprof
// listener is inside p's namespace when isolated, reached from there rather
// than through its In link, so a cut link does not blind the meter. It
// costs p two full collections per reading.
func liveHeap(p *cluster.Proc) (heapStats, []byte) {
	tr := &http.Transport{DisableKeepAlives: true}
	if p.Net != nil && p.Net.NS != nil {
		ns := p.Net.NS
		tr.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) { return ns.Dial(ctx, addr) }
	}
	cl := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	var body []byte
	for _, q := range []string{"gc=1", "gc=1&debug=1"} {
		resp, err := cl.Get("http://" + p.PprofAddr + "/debug/pprof/heap?" + q)
		if err != nil {
			return heapStats{}, nil
		}
		body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return heapStats{}, nil
		}
	}
	return readHeapStats(body), body
}

// readHeapStats reads the "# HeapAlloc = N", "# Sys = N" and
// "# HeapIdle = N" of a debug=1 heap profile (zero: none).
func readHeapStats(body []byte) heapStats {
	get := func(name string) int64 {
		n, _ := prefixedInt(bytes.NewReader(body), "# "+name+" = ")
		return n
	}
	h := heapStats{Alloc: get("HeapAlloc")}
	if h.Alloc > 0 {
		h.InUse = max(0, get("Sys")-get("HeapIdle"))
	}
	return h
}

// prefixedInt is the integer after prefix on the first line of r that
// starts with it (a unit after the number, as /proc's " kB", is left out);
// false when there is no such line.
func prefixedInt(r io.Reader, prefix string) (int64, bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0, true
			}
			n, _ := strconv.ParseInt(f[0], 10, 64)
			return n, true
		}
	}
	return 0, false
}

// unjudged are the processes the soak reads but does not hold to the growth
// limit: Kafka is kfake, which keeps every record in memory, and Redis
// holds the state of every person served; both grow with the load by
// design. The waitroom services and the front door must not.
var unjudged = map[string]bool{"kafka": true, "redis": true, "redis-replica": true, "sentinel-1": true, "sentinel-2": true, "sentinel-3": true}

// rssKiB is VmRSS of pid in KiB (0 when it cannot be read).
func rssKiB(pid int) int64 {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	defer f.Close()
	n, _ := prefixedInt(f, "VmRSS:")
	return n
}

// windows are the readings growth compares: the reference, up to a third
// of the way in, and the judged, up to the last reading, each the readings
// of the last twelfth of the run before it (5 minutes of an hour). With
// calm readings (Options.Calm) each is the calm readings of the last sixth
// before it, the reference's up to a twelfth past the third (the meter
// reads four times as often while calm: meter.next):
// memory at like moments, none taken mid-fault; an empty one is refused
// (why says so). Fewer than three readings prove nothing and are refused.
func windows(samples []sample) (base, last []sample, why string) {
	if len(samples) < 3 {
		return nil, nil, fmt.Sprintf("%d memory samples: too few to judge growth", len(samples))
	}
	end := samples[len(samples)-1].At
	third, w := end/3, end/12
	in := func(from, to time.Duration, calm bool) []sample {
		var out []sample
		for _, s := range samples {
			if s.At > from && s.At <= to && (s.Calm || !calm) {
				out = append(out, s)
			}
		}
		return out
	}
	if !slices.ContainsFunc(samples, func(s sample) bool { return s.Calm }) {
		return in(third-w, third, false), in(end-w, end, false), ""
	}
	// The calm window ends at the nemesis's third, a little after the
	// run's own (the load starts before the nemesis; the end waits for its
	// calm readings): up to a twelfth past the third.
	base, last = in(third-2*w, third+w, true), in(max(third+w, end-2*w), end, true)
	switch {
	case len(base) == 0:
		why = fmt.Sprintf("no calm memory reading from %s to %s, about a third of the way in: nothing to judge against", (third - 2*w).Round(time.Second), (third + w).Round(time.Second))
	case len(last) == 0:
		why = "no calm memory reading at the end: nothing to judge"
	}
	return base, last, why
}

// growthSlack is how much a measure may rise besides the limit's ratio
// before growth calls it growth: a value at the end fails only when it is
// above limit times the reference and more than this above it. Bounded
// pools fill in steps that a ratio of a small heap cannot tell from a leak:
// a go-redis client keeps every connection a fault made it open (its pool:
// 10 per GOMAXPROCS, 64 KiB of buffers each, so 1.25 MiB at two cores,
// never given back while in use), and the goroutines of a server follow its
// clients' open connections (the front door's to an api: tens, opened and
// closed between two readings). What it still catches over the 40 minutes
// judged (~46,000 people in an hour's soak): a heap leak of 46 bytes a
// person or 52 KiB a minute, a goroutine leaked per 5,000 people. RSS (the
// processes whose heap is not read) has none: x1.1 of tens of MiB is
// already above a pool.
var growthSlack = map[string]int64{"live heap bytes": 2 << 20, "goroutines": 8}

// growth checks the soak's memory: no process's RSS, nor its goroutines, nor
// its live heap (when read), at the end is above limit times the same a
// third of the way in (at 20 min of an hour: the warm-up is over, a leak has
// had 40 minutes to show), and more than growthSlack above it. Each side is
// a window of readings (see windows), so one reading does not decide: the
// mean of its readings, or with calm readings their floor (the least): a
// leak raises the floor, a request in flight at one reading does not. A
// zero is a reading that failed (a /metrics behind a held link), not a
// process with nothing, and is left out. Processes in unjudged are read but
// not judged. RSS alone moves without a leak (GOGC's headroom above the
// heap live at the last collection stays resident), so a process whose
// heap was read is judged on its live heap after two collections instead;
// its RSS and its runtime's memory in use (sample.Kept) are still printed,
// written and plotted.
func growth(samples []sample, limit float64, unjudged map[string]bool) []string {
	base, last, why := windows(samples)
	if why != "" {
		return []string{why}
	}
	floor := slices.ContainsFunc(base, func(s sample) bool { return s.Calm })
	value := func(ss []sample, get func(sample) map[string]int64, name string) float64 {
		var sum, n, least int64
		for _, s := range ss {
			if v := get(s)[name]; v > 0 {
				sum, n = sum+v, n+1
				if least == 0 || v < least {
					least = v
				}
			}
		}
		switch {
		case n == 0:
			return 0
		case floor:
			return float64(least)
		}
		return float64(sum) / float64(n)
	}
	var bad []string
	check := func(what string, get func(sample) map[string]int64) {
		for name := range get(base[0]) {
			if unjudged[name] {
				continue
			}
			was, now := value(base, get, name), value(last, get, name)
			if was > 0 && now > limit*was && now-was > float64(growthSlack[what]) {
				bad = append(bad, fmt.Sprintf("%s: %s %.0f at %s, %.0f at %s (more than x%.2f, and more than %d above)",
					name, what, now, last[len(last)-1].At.Round(time.Second), was, base[len(base)-1].At.Round(time.Second), limit, growthSlack[what]))
			}
		}
	}
	// A process whose live heap was read is judged on it (and its
	// goroutines), not on its RSS nor its runtime's memory in use (both
	// still read, written and plotted): those follow the heap's peaks
	// between readings (GOGC's headroom, spans and GC metadata sized for the
	// last peak), while what it keeps is the heap live after two
	// collections. The others (no pprof listener) are judged on RSS.
	heapRead := map[string]bool{}
	for _, s := range samples {
		for name, v := range s.Heap {
			heapRead[name] = heapRead[name] || v > 0
		}
	}
	check("RSS KiB", func(s sample) map[string]int64 {
		m := make(map[string]int64, len(s.RSS))
		for name, v := range s.RSS {
			if !heapRead[name] {
				m[name] = v
			}
		}
		return m
	})
	check("goroutines", func(s sample) map[string]int64 { return s.Goroutines })
	check("live heap bytes", func(s sample) map[string]int64 { return s.Heap })
	sort.Strings(bad)
	return bad
}
