// Command openloop sends requests at a fixed arrival rate, whatever the
// server's answers do (an open loop, as k6's constant-arrival-rate), and
// counts each request's latency from when it was due, not from when it was
// sent: a stall is charged to every request it delays, so the p99 shows the
// tail a closed loop (wrk -c64) hides by sending less while the server stalls.
//
//	openloop -url http://127.0.0.1:18080 -rate 5000 -dur 20s -tokens tokens.txt  # status reads
//	openloop -url http://127.0.0.1:18080 -rate 3000 -dur 20s -item drop           # registrations
//
// tokens.txt holds "itemId token" lines (bench/ceiling.sh writes one). It
// prints one line: path, rate asked and sent, answers, errors, p50/p90/p99/
// p99.9/max in ms, and how far behind schedule the sender fell at worst. It
// lives outside go.work (like bench/ceiling): build it with
//
//	cd bench/openloop && GOWORK=off go build -o /tmp/wr-openloop .
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	base := flag.String("url", "http://127.0.0.1:18080", "the server's base URL")
	rate := flag.Int("rate", 5000, "requests a second")
	dur := flag.Duration("dur", 20*time.Second, "how long to send")
	warm := flag.Duration("warm", 2*time.Second, "sent at the rate first and not counted")
	tokens := flag.String("tokens", "", `file of "itemId token" lines: read their status round robin`)
	item := flag.String("item", "", "register new users for this item (when -tokens is not set)")
	maxConns := flag.Int("conns", 2000, "most connections open at once; a request due when all are busy waits for one (and that wait counts)")
	label := flag.String("label", "", "a name printed first on the line")
	flag.Parse()
	if err := run(*base, *rate, *dur, *warm, *tokens, *item, *maxConns, *label); err != nil {
		fmt.Fprintln(os.Stderr, "openloop:", err)
		os.Exit(1)
	}
}

func run(base string, rate int, dur, warm time.Duration, tokens, item string, maxConns int, label string) error {
	if rate <= 0 || dur <= 0 {
		return fmt.Errorf("-rate and -dur must be positive")
	}
	paths, err := statusPaths(base, tokens)
	if err != nil {
		return err
	}
	if paths == nil && item == "" {
		return fmt.Errorf("give -tokens (status) or -item (register)")
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: maxConns, MaxConnsPerHost: maxConns, DisableCompression: true,
	}}
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	one := func(i int) bool {
		var resp *http.Response
		var err error
		if paths != nil {
			resp, err = hc.Get(paths[i%len(paths)])
		} else {
			body := `{"userId":"ol-` + runID + `-` + strconv.Itoa(i) + `"}`
			resp, err = hc.Post(base+"/api/v1/items/"+item+"/registrations", "application/json", bytes.NewReader([]byte(body)))
		}
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode/100 == 2 // 200 a status, 202 a registration (the ceiling answers 202 to both)
	}
	interval := time.Second / time.Duration(rate)
	warmN := int(warm / interval)
	n := warmN + int(dur/interval)
	start := time.Now().Add(50 * time.Millisecond)
	lat, worstBehind := send(start, interval, n, one)
	took := time.Since(start)
	path := "status"
	if paths == nil {
		path = "register"
	}
	report(label, path, rate, n, took, lat[warmN:], worstBehind)
	return nil
}

// statusPaths reads the tokens file ("<item> <token>" a line) into status
// paths; nil without a file (a register run).
func statusPaths(base, tokens string) ([]string, error) {
	if tokens == "" {
		return nil, nil
	}
	f, err := os.Open(tokens)
	if err != nil {
		return nil, fmt.Errorf("open tokens: %w", err)
	}
	defer f.Close()
	var paths []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if it, tok, ok := strings.Cut(strings.TrimSpace(sc.Text()), " "); ok {
			paths = append(paths, base+"/api/v1/items/"+it+"/registrations/"+tok)
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no tokens in %s", tokens)
	}
	return paths, nil
}

// send starts request i at start + i·interval whatever the earlier ones do
// (open loop), and returns each one's latency from when it was due (-1:
// failed) and how far behind its schedule the sender fell at most.
func send(start time.Time, interval time.Duration, n int, one func(int) bool) ([]time.Duration, time.Duration) {
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	var worstBehind time.Duration
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		} else if -d > worstBehind {
			worstBehind = -d
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := one(i)
			if !ok {
				lat[i] = -1
				return
			}
			lat[i] = time.Since(due)
		}()
	}
	wg.Wait()
	return lat, worstBehind
}

// report prints one line: counts and the latency quantiles of counted.
func report(label, path string, rate, n int, took time.Duration, counted []time.Duration, worstBehind time.Duration) {
	var fails int
	good := make([]time.Duration, 0, len(counted))
	for _, l := range counted {
		if l < 0 {
			fails++
			continue
		}
		good = append(good, l)
	}
	slices.Sort(good)
	q := func(p float64) float64 {
		if len(good) == 0 {
			return 0
		}
		return float64(good[min(len(good)-1, int(p*float64(len(good))))]) / 1e6
	}
	fmt.Printf("%s%s rate=%d sent=%d in %.1fs ok=%d errors=%d p50=%.2fms p90=%.2fms p99=%.2fms p99.9=%.2fms max=%.2fms sender-behind-max=%.1fms\n",
		prefix(label), path, rate, n, took.Seconds(), len(good), fails, q(0.5), q(0.9), q(0.99), q(0.999), q(1), float64(worstBehind)/1e6)
}

func prefix(label string) string {
	if label == "" {
		return ""
	}
	return label + " "
}
