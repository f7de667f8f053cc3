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
	for sleepCtx(ctx, every) {
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

// endCalmReadings is how many calm readings the end of a calm soak waits for.
const endCalmReadings = 2

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

// windows are the readings growth compares: the reference, a third of the
// way in, and the judged, at the end. Without calm readings each is a
// twelfth of the readings (5 of an hour's 60) ending at the third and at
// the end. With calm readings (Options.Calm) each is the calm readings
// among twice that many: memory at like moments, none taken mid-fault; an
// empty one is refused (why says so). Fewer than three readings prove
// nothing and are refused.
func windows(samples []sample) (base, last []sample, why string) {
	if len(samples) < 3 {
		return nil, nil, fmt.Sprintf("%d memory samples: too few to judge growth", len(samples))
	}
	w := max(1, len(samples)/12)
	third := len(samples) / 3
	if !slices.ContainsFunc(samples, func(s sample) bool { return s.Calm }) {
		return samples[max(0, third-w+1) : third+1], samples[len(samples)-w:], ""
	}
	calm := func(ss []sample) []sample {
		return slices.DeleteFunc(slices.Clone(ss), func(s sample) bool { return !s.Calm })
	}
	base = calm(samples[max(0, third-2*w+1) : third+1])
	last = calm(samples[max(third+1, len(samples)-2*w):])
	switch {
	case len(base) == 0:
		why = fmt.Sprintf("no calm memory reading in the %d up to %s, a third of the way in: nothing to judge against", third+1-max(0, third-2*w+1), samples[third].At.Round(time.Second))
	case len(last) == 0:
		why = "no calm memory reading at the end: nothing to judge"
	}
	return base, last, why
}

// growth checks the soak's memory: no process's RSS, nor its goroutines, nor
// its live heap (when read), at the end is above limit times the same a
// third of the way in (at 20 min of an hour: the warm-up is over, a leak has
// had 40 minutes to show). Each side is the mean of a window of readings
// (see windows), so one reading does not decide; a reading that failed
// (zero) is left out of its window. Processes in unjudged are read but not
// judged. RSS alone moves without a leak (GOGC's headroom above the heap
// live at the last collection stays resident), so a process whose heap was
// read is judged on its live heap after two collections instead; its RSS
// and its runtime's memory in use (sample.Kept) are still printed, written
// and plotted.
func growth(samples []sample, limit float64, unjudged map[string]bool) []string {
	base, last, why := windows(samples)
	if why != "" {
		return []string{why}
	}
	// mean of the readings taken: a zero is one that failed (a /metrics
	// behind a held link), not a process with nothing.
	// Each window's value: the mean of its readings, or with calm readings
	// their floor (the least): a leak raises the floor, a request in flight
	// at one reading does not. A zero is a reading that failed (a /metrics
	// behind a held link), not a process with nothing.
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
			if was > 0 && now > limit*was {
				bad = append(bad, fmt.Sprintf("%s: %s %.0f at %s, %.0f at %s (more than x%.2f)",
					name, what, now, last[len(last)-1].At.Round(time.Second), was, base[len(base)-1].At.Round(time.Second), limit))
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
