package cli

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
)

type statusOpts struct {
	benchOpts
	tokens int
}

func (o *statusOpts) validate() error {
	if err := o.benchOpts.validate(); err != nil {
		return err
	}
	if o.tokens <= 0 {
		return usagef("--tokens %d: must be positive", o.tokens)
	}
	return nil
}

func (a *app) benchStatusCmd() *cobra.Command {
	var o statusOpts
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Register --tokens people, wait until they are WAITING, then read their status --n times",
		Long: `Registers --tokens people (unique userIds per run) and waits until the API
says each is WAITING, then sends --n status GETs from --concurrency workers
cycling through those tokens, stopping early after --duration. Every answer must
be 200 with WAITING and a position, or ADMITTED; anything else is an error.
Exits 1 when more than --max-error-rate of the reads fail.`,
		Args: cobra.NoArgs,
		RunE: a.leaf(func(ctx context.Context) error { return a.runBenchStatus(ctx, &o) }),
	}
	a.benchFlags(cmd, &o.benchOpts, 50000)
	cmd.Flags().IntVar(&o.tokens, "tokens", 1000, "how many registrations to create and read")
	return cmd
}

func (a *app) runBenchStatus(ctx context.Context, o *statusOpts) error {
	if err := o.validate(); err != nil {
		return err
	}
	c := newAPI(o.url, o.concurrency, o.timeout)
	defer c.close()

	setupStart := time.Now()
	r := registrar{api: c, opts: &o.benchOpts, runID: newRunID(), n: o.tokens, keep: true}
	reg := r.run(ctx)
	if reg.stopped == stoppedInterrupted {
		return ctx.Err()
	}
	if len(reg.accepted) < o.tokens {
		return fmt.Errorf("setup: %d of %d registrations accepted (%s)", len(reg.accepted), o.tokens, reg.stopped)
	}
	if missing := waitVisible(ctx, c, &o.benchOpts, reg.accepted); missing > 0 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("setup: %d of %d registrations not WAITING within %s", missing, o.tokens, o.visibleAfter)
	}
	setup := time.Since(setupStart)

	tallies := make([]tally, o.concurrency)
	elapsed, stopped := loop(ctx, o.n, o.concurrency, o.duration, func(w, i int) {
		tok := reg.accepted[i%len(reg.accepted)]
		start := time.Now()
		code, st, err := c.status(ctx, tok.item, tok.token)
		d := time.Since(start)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil || code != 200:
			tallies[w].fail(errorKey(code, err))
		case st.Status == statusWaiting && st.Position > 0, st.Status == statusAdmitted:
			tallies[w].ok(d)
		case st.Status == statusWaiting:
			tallies[w].fail("mismatch-WAITING-without-position")
		default:
			tallies[w].fail("mismatch-" + st.Status)
		}
	})
	res := merge(tallies)
	if err := a.printStatus(o, r.runID, setup, elapsed, stopped, &res); err != nil {
		return err
	}
	if stopped == stoppedInterrupted {
		return ctx.Err()
	}
	return checkErrorRate(&res, o.maxErrorRate, "status read")
}

// waitVisible polls every registration until it is WAITING (or ADMITTED),
// from o.concurrency workers, and returns how many never were.
func waitVisible(ctx context.Context, c *api, o *benchOpts, regs []registration) int {
	var next atomic.Int64
	var missing atomic.Int64
	var wg sync.WaitGroup
	for range min(o.concurrency, len(regs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(regs) {
					return
				}
				if !untilVisible(ctx, c, o, regs[i].item, regs[i].token) {
					missing.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(missing.Load())
}

// statusReport is bench status's -o json.
type statusReport struct {
	URL            string         `json:"url"`
	Items          []string       `json:"items"`
	RunID          string         `json:"runId"`
	Tokens         int            `json:"tokens"`
	SetupSeconds   float64        `json:"setupSeconds"`
	Concurrency    int            `json:"concurrency"`
	Stopped        string         `json:"stopped"`
	ElapsedSeconds float64        `json:"elapsedSeconds"`
	Reads          int            `json:"reads"`
	OK             int            `json:"ok"`
	Errors         int            `json:"errors"`
	ErrorsByKind   map[string]int `json:"errorsByKind"`
	ErrorRate      float64        `json:"errorRate"`
	PerSecond      float64        `json:"readsPerSecond"`
	Latency        Latency        `json:"latency"`
}

func (a *app) printStatus(o *statusOpts, runID string, setup, elapsed time.Duration, stopped string, res *tally) error {
	lat := Summarize(res.lat)
	rate := perSecond(len(res.lat), elapsed)
	if a.wantJSON() {
		return a.printJSON(statusReport{
			URL: o.url, Items: o.items, RunID: runID, Tokens: o.tokens, SetupSeconds: math.Round(setup.Seconds()*1000) / 1000,
			Concurrency: o.concurrency, Stopped: stopped, ElapsedSeconds: math.Round(elapsed.Seconds()*1000) / 1000,
			Reads: res.sent, OK: len(res.lat), Errors: res.failed(), ErrorsByKind: res.errors, ErrorRate: res.errorRate(),
			PerSecond: round2(rate), Latency: lat,
		})
	}
	w := a.out
	fmt.Fprintf(w, "bench status  %s  items=%s  concurrency=%d  run=%s\n", o.url, strings.Join(o.items, ","), o.concurrency, runID)
	fmt.Fprintf(w, "%-15s%d registered and WAITING in %.3fs\n", "setup", o.tokens, setup.Seconds())
	fmt.Fprintf(w, "%-15s%s after %.3fs\n", "stopped", stopped, elapsed.Seconds())
	fmt.Fprintf(w, "%-15s%d\n", "reads", res.sent)
	fmt.Fprintf(w, "%-15s%d (200, WAITING with a position or ADMITTED)\n", "ok", len(res.lat))
	writeErrors(w, "errors", res)
	fmt.Fprintf(w, "%-15s%.1f reads/s\n", "throughput", rate)
	_, err := fmt.Fprintf(w, "%-15s%s\n", "latency", lat)
	return err
}
