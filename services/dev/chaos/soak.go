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
	// Kept is RSS less the heap's free pages the runtime still holds
	// (HeapIdle - HeapReleased), in KiB, read right after that forced
	// collection: the memory the process keeps, without the headroom
	// GOGC=400 leaves resident between collections, which swings with the
	// heap live at the last one. Nil when the heap was not read.
	Kept map[string]int64
}

// meter reads every process's RSS (/proc/PID/status), goroutines (the
// go_goroutines of its /metrics) and, for a service with a pprof listener
// (cluster.Options.Pprof), live heap every interval, prints a line per
// reading and appends it to a CSV file: the soak's memory curve.
type meter struct {
	c     *cluster.Cluster
	out   io.Writer
	csv   string
	start time.Time

	mu      sync.Mutex
	samples []sample
}

func (m *meter) run(ctx context.Context, every time.Duration) {
	if f, err := os.Create(m.csv); err == nil {
		fmt.Fprintln(f, "minutes,process,rss_kib,goroutines,heap_bytes,kept_kib")
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
				fmt.Fprintf(f, "%.2f,%s,%d,%d,%d,%d\n", s.At.Minutes(), p.Name, s.RSS[p.Name], s.Goroutines[p.Name], s.Heap[p.Name], s.Kept[p.Name])
			}
		}
		if f != nil {
			f.Close()
		}
		fmt.Fprintf(m.out, "soak: +%s rss/goroutines/live heap/kept: %s\n", s.At.Round(time.Second), strings.Join(line, ", "))
	}
}

func (m *meter) read() sample {
	s := sample{At: time.Since(m.start), RSS: map[string]int64{}, Goroutines: map[string]int64{}, Heap: map[string]int64{}, Kept: map[string]int64{}}
	cl := &http.Client{Timeout: 2 * time.Second}
	for _, p := range m.c.All() {
		// The heap first: its forced collection, then RSS right after it,
		// so Kept subtracts the free pages of the same moment.
		var h heapStats
		if p.PprofAddr != "" {
			var prof []byte
			h, prof = liveHeap(p)
			s.Heap[p.Name] = h.Alloc
			m.keepProfile(p.Name, s.At, prof)
		}
		if pid := p.PID(); pid > 0 {
			s.RSS[p.Name] = rssKiB(pid)
			if h.Alloc > 0 && s.RSS[p.Name] > 0 {
				s.Kept[p.Name] = max(0, s.RSS[p.Name]-h.Free>>10)
			}
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
	return s
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
	Free  int64 // HeapIdle - HeapReleased: free pages still resident
}

// liveHeap reads p's heap profile taken after a forced collection
// (/debug/pprof/heap?gc=1&debug=1): zero when it cannot be read. The pprof listener is inside p's namespace when isolated, reached
// from there rather than through its In link, so a cut link does not blind
// the meter. It costs p one full collection per reading.
func liveHeap(p *cluster.Proc) (heapStats, []byte) {
	tr := &http.Transport{DisableKeepAlives: true}
	if p.Net != nil && p.Net.NS != nil {
		ns := p.Net.NS
		tr.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) { return ns.Dial(ctx, addr) }
	}
	cl := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	resp, err := cl.Get("http://" + p.PprofAddr + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return heapStats{}, nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return heapStats{}, nil
	}
	return readHeapStats(body), body
}

// readHeapStats reads the "# HeapAlloc = N", "# HeapIdle = N" and
// "# HeapReleased = N" of a debug=1 heap profile (zero: none).
func readHeapStats(body []byte) heapStats {
	get := func(name string) int64 {
		n, _ := prefixedInt(bytes.NewReader(body), "# "+name+" = ")
		return n
	}
	h := heapStats{Alloc: get("HeapAlloc")}
	if h.Alloc > 0 {
		h.Free = max(0, get("HeapIdle")-get("HeapReleased"))
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

// growth checks the soak's memory: no process's RSS, nor its goroutines, nor
// its live heap (when read), at the end is above limit times the same a
// third of the way in (at 20 min of an hour: the warm-up is over, a leak has
// had 40 minutes to show). Each side is the mean of a window of readings (a
// twelfth of them: 5 of an hour's 60), so one reading taken mid-fault does
// not decide; a reading that failed (zero) is left out of its window. Fewer
// than three readings prove nothing and are refused. Processes in unjudged
// are read but not judged. RSS alone moves without a leak (GOGC's headroom
// above the heap live at the last collection stays resident), so a process
// whose heap was read is judged on its RSS less the heap's free pages
// (sample.Kept) instead, beside its live heap; the raw RSS is still printed,
// written and plotted.
func growth(samples []sample, limit float64, unjudged map[string]bool) []string {
	if len(samples) < 3 {
		return []string{fmt.Sprintf("%d memory samples: too few to judge growth", len(samples))}
	}
	w := max(1, len(samples)/12)
	third := len(samples) / 3
	base := samples[max(0, third-w+1) : third+1]
	last := samples[len(samples)-w:]
	// mean of the readings taken: a zero is one that failed (a /metrics
	// behind a held link), not a process with nothing.
	mean := func(ss []sample, get func(sample) map[string]int64, name string) float64 {
		var sum, n int64
		for _, s := range ss {
			if v := get(s)[name]; v > 0 {
				sum, n = sum+v, n+1
			}
		}
		if n == 0 {
			return 0
		}
		return float64(sum) / float64(n)
	}
	var bad []string
	check := func(what string, get func(sample) map[string]int64) {
		for name := range get(base[0]) {
			if unjudged[name] {
				continue
			}
			was, now := mean(base, get, name), mean(last, get, name)
			if was > 0 && now > limit*was {
				bad = append(bad, fmt.Sprintf("%s: %s %.0f at %s, %.0f at %s (more than x%.2f)",
					name, what, now, last[len(last)-1].At.Round(time.Second), was, base[len(base)-1].At.Round(time.Second), limit))
			}
		}
	}
	// A process whose kept memory was read is judged on it, not on its raw
	// RSS (see sample.Kept); the others (no pprof listener) on RSS.
	kept := map[string]bool{}
	for _, s := range samples {
		for name, v := range s.Kept {
			kept[name] = kept[name] || v > 0
		}
	}
	check("RSS KiB", func(s sample) map[string]int64 {
		m := make(map[string]int64, len(s.RSS))
		for name, v := range s.RSS {
			if !kept[name] {
				m[name] = v
			}
		}
		return m
	})
	check("RSS less free heap pages KiB", func(s sample) map[string]int64 {
		m := make(map[string]int64, len(kept))
		for name := range kept {
			m[name] = s.Kept[name]
		}
		return m
	})
	check("goroutines", func(s sample) map[string]int64 { return s.Goroutines })
	check("live heap bytes", func(s sample) map[string]int64 { return s.Heap })
	sort.Strings(bad)
	return bad
}
