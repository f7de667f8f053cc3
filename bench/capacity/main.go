// Command capacity is the client and the arithmetic of bench/capacity.sh.
//
//	capacity streams -url http://127.0.0.1:22390 -tokens tokens.txt -n 2000 -count counts.txt -dur 60s
//	capacity size -measured measured.txt [-people 1000000 -window 60s -poll 5s -share 0.8 -admit 1000]
//
// streams opens n Server-Sent Events streams on the notifier, one for each
// of the first n "itemId token" lines, holds them for dur, and keeps the
// file named by -count at "opened events pings ended failed" (rewritten
// every 100 ms), so the script can read how many updates were delivered
// between two instants. size reads the CPU the script measured per phase
// and prints each service's CPU per unit and the cores a sale of -people in
// -window needs (the formula: size.go). It lives outside go.work (like
// bench/openloop): build it with
//
//	cd bench/capacity && GOWORK=off go build -o /tmp/wr-capacity .
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: capacity streams|size [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "streams":
		err = streamsCmd(os.Args[2:])
	case "size":
		err = sizeCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: streams or size", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "capacity:", err)
		os.Exit(1)
	}
}

// streamCounts are what the open streams saw, summed over all of them.
type streamCounts struct {
	opened, events, pings, ended, failed atomic.Int64
}

func (c *streamCounts) String() string {
	return fmt.Sprintf("%d %d %d %d %d", c.opened.Load(), c.events.Load(), c.pings.Load(), c.ended.Load(), c.failed.Load())
}

func streamsCmd(args []string) error {
	fs := flag.NewFlagSet("streams", flag.ExitOnError)
	base := fs.String("url", "http://127.0.0.1:18090", "the notifier's base URL")
	tokens := fs.String("tokens", "", `file of "itemId token" lines`)
	n := fs.Int("n", 1000, "streams to open (at most one per line of -tokens)")
	countFile := fs.String("count", "", "file kept at \"opened events pings ended failed\"")
	dur := fs.Duration("dur", time.Minute, "how long to hold the streams")
	opening := fs.Int("opening", 100, "streams being opened at once")
	_ = fs.Parse(args)
	paths, err := eventPaths(*base, *tokens, *n)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *dur)
	defer cancel()
	var c streamCounts
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1, DisableCompression: true}}
	var wg sync.WaitGroup
	slots := make(chan struct{}, *opening)
	for _, p := range paths {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			listen(ctx, hc, p, &c, func() { <-slots })
		}()
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		writeCounts(*countFile, &c)
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	wg.Wait()
	writeCounts(*countFile, &c)
	fmt.Println(c.String())
	return nil
}

// listen holds one stream until ctx ends or the server ends it, counting
// its events and heartbeats; opened is called once the answer's head came
// (or the open failed), to let the next stream open.
func listen(ctx context.Context, hc *http.Client, url string, c *streamCounts, opened func()) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		c.failed.Add(1)
		opened()
		return
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := hc.Do(req)
	opened()
	if err != nil || resp.StatusCode != http.StatusOK {
		if ctx.Err() == nil {
			c.failed.Add(1)
		}
		if err == nil {
			resp.Body.Close()
		}
		return
	}
	defer resp.Body.Close()
	c.opened.Add(1)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		switch line := sc.Text(); {
		case strings.HasPrefix(line, "event:"):
			c.events.Add(1)
		case strings.HasPrefix(line, ":"):
			c.pings.Add(1)
		}
	}
	if ctx.Err() == nil {
		c.ended.Add(1) // the server ended it: a final state such as admitted
	}
}

// writeCounts replaces file with the counts (a rename, so a reader never
// sees half a line).
func writeCounts(file string, c *streamCounts) {
	if file == "" {
		return
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(c.String()+"\n"), 0o644); err == nil {
		_ = os.Rename(tmp, file)
	}
}

// eventPaths turns the first n lines of the tokens file into event stream
// URLs.
func eventPaths(base, tokens string, n int) ([]string, error) {
	f, err := os.Open(tokens)
	if err != nil {
		return nil, fmt.Errorf("open tokens: %w", err)
	}
	defer f.Close()
	var paths []string
	sc := bufio.NewScanner(f)
	for sc.Scan() && len(paths) < n {
		if it, tok, ok := strings.Cut(strings.TrimSpace(sc.Text()), " "); ok {
			paths = append(paths, base+"/api/v1/items/"+it+"/registrations/"+tok+"/events")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	if len(paths) < n {
		return nil, fmt.Errorf("%d tokens in %s, %d streams asked", len(paths), tokens, n)
	}
	return paths, nil
}
