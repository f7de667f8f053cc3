package chaos

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The soak's plot is drawn from the meter's CSV: the samples read back are
// the ones written, and the SVG is well-formed, with one curve per process
// in each panel (RSS and goroutines) and a legend entry per process.
func TestThePlotDrawsEveryProcessFromTheMetersCSV(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "meter.csv")
	var want []sample
	body := "minutes,process,rss_kib,goroutines\n"
	for m := 1; m <= 30; m++ {
		s := sample{At: time.Duration(m) * time.Minute, RSS: map[string]int64{"api-1": 60000 + int64(m)*100, "kafka": 30000 * int64(m)},
			Goroutines: map[string]int64{"api-1": 40, "kafka": 0}}
		want = append(want, s)
		body += strings.Join([]string{trimFloat(s.At.Minutes()), "api-1", itoa(s.RSS["api-1"]), "40"}, ",") + "\n"
		body += strings.Join([]string{trimFloat(s.At.Minutes()), "kafka", itoa(s.RSS["kafka"]), "0"}, ",") + "\n"
	}
	if err := os.WriteFile(csv, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	got, names, err := readMeterCSV(csv)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(names, []string{"api-1", "kafka"}) {
		t.Fatalf("read back %d samples of %v, want the %d written", len(got), names, len(want))
	}
	svg := filepath.Join(dir, "meter.svg")
	if err := PlotMeter(csv, svg, "a <test> run"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(svg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	counts := map[string]int{}
	var texts []string
	d := xml.NewDecoder(f)
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the plot is not well-formed SVG: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			counts[e.Name.Local]++
		case xml.CharData:
			texts = append(texts, string(e))
		}
	}
	// api-1 in both panels; kafka's goroutines are all zero (never read):
	// no curve for them.
	if counts["polyline"] != 3 {
		t.Fatalf("%d curves, want 3 (RSS of api-1 and kafka, goroutines of api-1)", counts["polyline"])
	}
	all := strings.Join(texts, "|")
	for _, s := range []string{"a <test> run", "api-1", "kafka", "RSS (MiB)", "goroutines", "reference", "judged"} {
		if !strings.Contains(all, s) {
			t.Fatalf("the plot has no %q", s)
		}
	}
}

func trimFloat(f float64) string { return strings.TrimSuffix(strings.TrimRight(fmtF(f), "0"), ".") }
func fmtF(f float64) string      { return strconv.FormatFloat(f, 'f', 2, 64) }
func itoa(n int64) string        { return strconv.FormatInt(n, 10) }

// A meter.csv with the live heap draws it in a third panel, one curve per
// process whose heap was read (kafka's is never: zero).
func TestThePlotDrawsTheLiveHeap(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "meter.csv")
	body := "minutes,process,rss_kib,goroutines,heap_bytes\n"
	for m := 1; m <= 30; m++ {
		body += trimFloat(float64(m)) + ",api-1,60000,40," + itoa(20<<20+int64(m)<<16) + "\n"
		body += trimFloat(float64(m)) + ",kafka,30000,0,0\n"
	}
	if err := os.WriteFile(csv, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	svg := filepath.Join(dir, "meter.svg")
	if err := PlotMeter(csv, svg, "heap"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b, new(struct{})); err != nil {
		t.Fatalf("the plot is not well-formed SVG: %v", err)
	}
	// RSS of api-1 and kafka, goroutines of api-1, live heap of api-1.
	if n := strings.Count(string(b), "<polyline"); n != 4 || !strings.Contains(string(b), "live heap after two GCs (MiB)") {
		t.Fatalf("%d curves, want 4 with a live heap panel", n)
	}
}
