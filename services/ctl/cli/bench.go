package cli

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/waitroom/waitroom/topics"
)

// benchOpts are the flags every bench shares.
type benchOpts struct {
	url          string
	items        []string
	n            int
	concurrency  int
	duration     time.Duration
	timeout      time.Duration
	maxErrorRate float64
	pollEvery    time.Duration
	visibleAfter time.Duration
}

// maxConcurrency keeps a typo from opening a hundred thousand sockets.
const maxConcurrency = 10000

func (o *benchOpts) validate() error {
	if err := validURL(o.url); err != nil {
		return err
	}
	if len(o.items) == 0 {
		return usagef("--items: at least one item is needed")
	}
	for _, it := range o.items {
		if !topics.ValidID(it) {
			return usagef("--items: %q is not %s", it, topics.IDRule)
		}
	}
	switch {
	case o.n <= 0:
		return usagef("--n %d: must be positive", o.n)
	case o.concurrency <= 0 || o.concurrency > maxConcurrency:
		return usagef("--concurrency %d: must be in 1..%d", o.concurrency, maxConcurrency)
	case o.duration <= 0:
		return usagef("--duration %s: must be positive", o.duration)
	case o.timeout <= 0:
		return usagef("--timeout %s: must be positive", o.timeout)
	case o.maxErrorRate < 0 || o.maxErrorRate > 1:
		return usagef("--max-error-rate %v: must be in 0..1", o.maxErrorRate)
	case o.pollEvery <= 0:
		return usagef("--poll-interval %s: must be positive", o.pollEvery)
	case o.visibleAfter <= 0:
		return usagef("--visible-timeout %s: must be positive", o.visibleAfter)
	}
	return nil
}

func (a *app) benchFlags(cmd *cobra.Command, o *benchOpts, n int) {
	f := cmd.Flags()
	f.StringVar(&o.url, "url", a.env.APIURL, "base URL of the API (env WR_API_URL)")
	f.StringSliceVar(&o.items, "items", []string{"concert-2026"}, "items to register for, comma separated (round robin)")
	f.IntVar(&o.n, "n", n, "how many requests to send")
	f.IntVar(&o.concurrency, "concurrency", 64, "requests in flight at once (one keep-alive connection each)")
	f.DurationVar(&o.duration, "duration", 60*time.Second, "stop sending after this long even if --n is not reached")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "timeout of one HTTP request")
	f.Float64Var(&o.maxErrorRate, "max-error-rate", 0.01, "exit 1 when more than this fraction of requests fail")
	f.DurationVar(&o.pollEvery, "poll-interval", 2*time.Millisecond, "pause between two status polls of one registration")
	f.DurationVar(&o.visibleAfter, "visible-timeout", 10*time.Second, "give up polling a registration that is not WAITING after this long")
}

func (a *app) benchCmd() *cobra.Command {
	return group("bench", "Load a running stack over HTTP and print throughput and latency percentiles",
		a.benchRegisterCmd(), a.benchStatusCmd())
}

// Why a bench loop stopped.
const (
	stoppedN           = "n reached"
	stoppedDuration    = "duration cap"
	stoppedInterrupted = "interrupted"
)

// loop calls do(w, i) for i = 0..n-1 from workers goroutines (w is the
// worker's index, for per-worker tallies without locks) until every i is done
// or limit has passed. A request in flight when limit passes is finished. It
// returns how long that took and why it stopped.
func loop(ctx context.Context, n, workers int, limit time.Duration, do func(w, i int)) (time.Duration, string) {
	capCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for capCtx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				do(w, i)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	switch {
	case ctx.Err() != nil:
		return elapsed, stoppedInterrupted
	case int(next.Load()) >= n:
		return elapsed, stoppedN
	default:
		return elapsed, stoppedDuration
	}
}

// tally counts one worker's requests.
type tally struct {
	sent   int
	errors map[string]int
	lat    []time.Duration // of the requests that succeeded
}

func (t *tally) fail(key string) {
	t.sent++
	if t.errors == nil {
		t.errors = map[string]int{}
	}
	t.errors[key]++
}

func (t *tally) ok(d time.Duration) {
	t.sent++
	t.lat = append(t.lat, d)
}

// merge adds up per-worker tallies.
func merge(ts []tally) tally {
	var all tally
	all.errors = map[string]int{}
	for _, t := range ts {
		all.sent += t.sent
		all.lat = append(all.lat, t.lat...)
		for k, v := range t.errors {
			all.errors[k] += v
		}
	}
	return all
}

func (t *tally) failed() int { return t.sent - len(t.lat) }

func (t *tally) errorRate() float64 {
	if t.sent == 0 {
		return 0
	}
	return float64(t.failed()) / float64(t.sent)
}

// registration is one accepted registration.
type registration struct{ item, token string }

// registrar sends registrations with unique userIds from a pool of workers.
type registrar struct {
	api    *api
	poll   *api
	opts   *benchOpts
	runID  string // prefix of this run's userIds, so runs never collide
	n      int
	keep   bool // keep every accepted registration (for bench status)
	sample int  // poll every sample-th registration until visible; 0: none
}

// registerResult is what a registrar measured.
type registerResult struct {
	tally
	elapsed    time.Duration
	stopped    string
	accepted   []registration // when keep
	visible    []time.Duration
	sampled    int
	notVisible int
}

func newRunID() string { return "bench-" + strings.ToLower(rand.Text()[:8]) }

func (r *registrar) run(ctx context.Context) registerResult {
	workers := min(r.opts.concurrency, r.n)
	tallies := make([]tally, workers)
	kept := make([][]registration, workers)
	var (
		mu    sync.Mutex
		res   registerResult
		visWG sync.WaitGroup
	)
	res.elapsed, res.stopped = loop(ctx, r.n, workers, r.opts.duration, func(w, i int) {
		item := r.opts.items[i%len(r.opts.items)]
		start := time.Now()
		code, tok, err := r.api.register(ctx, item, r.runID+"-"+strconv.Itoa(i))
		d := time.Since(start)
		switch {
		case ctx.Err() != nil:
			return // the operator stopped the run: not the server's failure
		case err != nil || code != 202:
			tallies[w].fail(errorKey(code, err))
			return
		}
		tallies[w].ok(d)
		if r.keep {
			kept[w] = append(kept[w], registration{item: item, token: tok})
		}
		if r.sample > 0 && i%r.sample == 0 {
			visWG.Go(func() {
				seen := untilVisible(ctx, r.poll, r.opts, item, tok)
				d := time.Since(start)
				mu.Lock()
				defer mu.Unlock()
				res.sampled++
				if seen {
					res.visible = append(res.visible, d)
				} else {
					res.notVisible++
				}
			})
		}
	})
	visWG.Wait()
	res.tally = merge(tallies)
	for _, k := range kept {
		res.accepted = append(res.accepted, k...)
	}
	return res
}

// untilVisible polls a registration until the API answers WAITING or
// ADMITTED (true), or until it gives up: another status than PENDING, or
// o.visibleAfter passed (false). Failed polls are retried.
func untilVisible(ctx context.Context, c *api, o *benchOpts, item, token string) bool {
	deadline := time.Now().Add(o.visibleAfter)
	for {
		code, st, err := c.status(ctx, item, token)
		if err == nil && code == 200 {
			switch st.Status {
			case statusWaiting, statusAdmitted:
				return true
			case statusPending:
			default:
				return false
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(o.pollEvery):
		}
	}
}

// writeErrors prints "n (x%)" and the errors by key, sorted.
func writeErrors(w io.Writer, label string, t *tally) {
	fmt.Fprintf(w, "%-15s%d (%.2f%%)", label, t.failed(), 100*t.errorRate())
	for _, k := range slices.Sorted(maps.Keys(t.errors)) {
		fmt.Fprintf(w, "  %s=%d", k, t.errors[k])
	}
	fmt.Fprintln(w)
}

// perSecond is n per second of d.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// checkErrorRate fails a bench whose error rate is above the limit, or that sent nothing.
func checkErrorRate(t *tally, limit float64, what string) error {
	if t.sent == 0 {
		return fmt.Errorf("no %s was sent", what)
	}
	if r := t.errorRate(); r > limit {
		return fmt.Errorf("%d of %d %ss failed (%.2f%%), above --max-error-rate %.2f%%", t.failed(), t.sent, what, 100*r, 100*limit)
	}
	return nil
}

// round2 rounds to two decimals for JSON.
func round2(f float64) float64 { return math.Round(f*100) / 100 }
