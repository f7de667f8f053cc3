package chaos

import (
	"encoding/csv"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// plotSVG draws the soak's curves as an SVG: each process's RSS (MiB),
// goroutines and, when read, live heap (MiB) over the run, one panel each, with the window the soak judges
// against (a third of the way in) and the window it judges (the end)
// shaded, as growth reads them. Processes are drawn in the order given.
func plotSVG(w io.Writer, samples []sample, names []string, title string) error {
	if len(samples) == 0 {
		return fmt.Errorf("plot: no samples")
	}
	const (
		width, panelH   = 900, 300
		left, right     = 70, 170
		top, gap, below = 40, 60, 40
	)
	specs := meterPanels(samples)
	panels := len(specs)
	height := top + panels*panelH + (panels-1)*gap + below
	span := samples[len(samples)-1].At.Minutes()
	if span <= 0 {
		span = 1
	}
	x := func(d time.Duration) float64 { return left + d.Minutes()/span*float64(width-left-right) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="22" font-size="15">%s</text>`+"\n", left, html.EscapeString(title))
	// The windows growth compares (see growth): shaded on both panels.
	base, last, _ := windows(samples)
	shade := func(ss []sample, y0 int, label string) {
		if len(ss) == 0 {
			return
		}
		x0, x1 := x(ss[0].At)-3, x(ss[len(ss)-1].At)+3
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#eee"/><text x="%.1f" y="%d" fill="#888" font-size="10">%s</text>`+"\n",
			x0, y0, x1-x0, panelH, x0, y0+panelH+12, label)
	}
	panel := func(i int, what string, get func(sample) map[string]int64, scale float64) {
		y0 := top + i*(panelH+gap)
		shade(base, y0, "reference")
		shade(last, y0, "judged")
		var most float64
		for _, s := range samples {
			for _, n := range names {
				most = max(most, float64(get(s)[n])/scale)
			}
		}
		most = niceCeil(most)
		y := func(v float64) float64 { return float64(y0+panelH) - v/most*panelH }
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", left, y0-6, what)
		for t := 0; t <= 4; t++ {
			v := most * float64(t) / 4
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
				left, width-right, y(v), y(v), left-6, y(v)+4, strconv.FormatFloat(v, 'f', -1, 64))
		}
		minuteTicks(&b, span, x, y0+panelH)
		shown := 0 // legend rows so far: a process without readings has none
		for j, n := range names {
			var pts []string
			for _, s := range samples {
				if v, ok := get(s)[n]; ok && v > 0 { // a zero is a reading that failed
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.At), y(float64(v)/scale)))
				}
			}
			if len(pts) == 0 {
				continue
			}
			c := plotColor(j)
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", c, strings.Join(pts, " "))
			ly := y0 + 14 + 15*shown
			shown++
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d">%s</text>`+"\n",
				width-right+10, width-right+30, ly-4, ly-4, c, width-right+36, ly, html.EscapeString(n))
		}
	}
	for i, p := range specs {
		panel(i, p.what, p.get, p.scale)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// panelSpec is one panel of the meter's plot: its title, its readings and
// the unit they are divided by.
type panelSpec struct {
	what  string
	get   func(sample) map[string]int64
	scale float64
}

// meterPanels are the panels of samples: RSS and goroutines, then the kept
// memory and the live heap when the meter read them.
func meterPanels(samples []sample) []panelSpec {
	ps := []panelSpec{
		{"RSS (MiB)", func(s sample) map[string]int64 { return s.RSS }, 1024},
		{"goroutines", func(s sample) map[string]int64 { return s.Goroutines }, 1},
	}
	if slices.ContainsFunc(samples, func(s sample) bool { return len(s.Kept) > 0 }) {
		ps = append(ps, panelSpec{"runtime memory in use after two GCs (Sys - HeapIdle, MiB)", func(s sample) map[string]int64 { return s.Kept }, 1024})
	}
	if slices.ContainsFunc(samples, func(s sample) bool { return len(s.Heap) > 0 }) {
		ps = append(ps, panelSpec{"live heap after two GCs (MiB): judged", func(s sample) map[string]int64 { return s.Heap }, 1 << 20})
	}
	return ps
}

// minuteTicks draws the time axis of a panel whose bottom is at y0: a tick
// and its minute at a nice step, about six over the span.
func minuteTicks(b *strings.Builder, span float64, x func(time.Duration) float64, y0 int) {
	step := niceCeil(span / 6)
	for m := 0.0; m <= span+1e-9; m += step {
		xv := x(time.Duration(m * float64(time.Minute)))
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#999"/><text x="%.1f" y="%d" text-anchor="middle">%g min</text>`+"\n",
			xv, xv, y0, y0+4, xv, y0+26, m)
	}
}

// plotColor is the colour of the j-th process's curve.
func plotColor(j int) string {
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
		"#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#000000", "#e7ba52", "#5254a3", "#ad494a"}
	return colors[j%len(colors)]
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (0 stays 1).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// readMeterCSV reads the samples a meter wrote (meter.csv) and the
// processes in the order they appear, so a kept run can be plotted again.
func readMeterCSV(path string) ([]sample, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	var samples []sample
	var names []string
	for i, r := range rows {
		if i == 0 || len(r) < 4 {
			continue // the header
		}
		min, err1 := strconv.ParseFloat(r[0], 64)
		rss, err2 := strconv.ParseInt(r[2], 10, 64)
		gr, err3 := strconv.ParseInt(r[3], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, nil, fmt.Errorf("%s line %d: not minutes,process,rss_kib,goroutines: %v", path, i+1, r)
		}
		at := time.Duration(min * float64(time.Minute))
		if len(samples) == 0 || samples[len(samples)-1].At != at {
			samples = append(samples, sample{At: at, RSS: map[string]int64{}, Goroutines: map[string]int64{}})
		}
		s := &samples[len(samples)-1]
		s.RSS[r[1]], s.Goroutines[r[1]] = rss, gr
		if len(r) > 4 { // heap_bytes, since the meter reads the live heap
			heap, err := strconv.ParseInt(r[4], 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("%s line %d: heap_bytes: %w", path, i+1, err)
			}
			if s.Heap == nil {
				s.Heap = map[string]int64{}
			}
			s.Heap[r[1]] = heap
		}
		if len(r) > 6 { // calm, since the soak holds the nemesis off before its judged readings
			s.Calm = r[6] == "1"
		}
		if len(r) > 5 { // kept_kib: the runtime's memory in use (RSS less the heap's free pages before session 9)
			kept, err := strconv.ParseInt(r[5], 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("%s line %d: kept_kib: %w", path, i+1, err)
			}
			if s.Kept == nil {
				s.Kept = map[string]int64{}
			}
			s.Kept[r[1]] = kept
		}
		if !slices.Contains(names, r[1]) {
			names = append(names, r[1])
		}
	}
	return samples, names, nil
}

// PlotMeter draws the curves of a meter.csv (a soak's, or any run with
// WR_CHAOS_METER) into svg.
func PlotMeter(csvPath, svg, title string) error {
	samples, names, err := readMeterCSV(csvPath)
	if err != nil {
		return err
	}
	f, err := os.Create(svg)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := plotSVG(f, samples, names, title); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
