package cli

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/spf13/cobra"
)

type registerOpts struct {
	benchOpts
	visibleSample int
}

func (o *registerOpts) validate() error {
	if err := o.benchOpts.validate(); err != nil {
		return err
	}
	if o.visibleSample < 0 {
		return usagef("--visible-sample %d: must be 0 (off) or positive", o.visibleSample)
	}
	return nil
}

func (a *app) benchRegisterCmd() *cobra.Command {
	var o registerOpts
	cmd := &cobra.Command{
		Use:   "register",
		Short: "POST registrations as fast as --concurrency allows; print throughput, 202 latency and register→WAITING latency",
		Long: `Sends --n registrations (unique userIds per run) from --concurrency workers,
stopping early after --duration. Every --visible-sample-th accepted registration
is polled until the API says WAITING (or ADMITTED), which measures how long a
registration takes to go through Kafka and the consumer into the Redis line.
Exits 1 when more than --max-error-rate of the registrations fail.`,
		Args: cobra.NoArgs,
		RunE: a.leaf(func(ctx context.Context) error { return a.runBenchRegister(ctx, &o) }),
	}
	a.benchFlags(cmd, &o.benchOpts, 20000)
	cmd.Flags().IntVar(&o.visibleSample, "visible-sample", 50, "poll every Nth registration until WAITING to measure register→visible latency; 0 turns it off")
	return cmd
}

func (a *app) runBenchRegister(ctx context.Context, o *registerOpts) error {
	if err := o.validate(); err != nil {
		return err
	}
	c := newAPI(o.url, o.concurrency, o.timeout)
	defer c.close()
	poll := newAPI(o.url, o.concurrency, o.timeout)
	defer poll.close()
	r := registrar{api: c, poll: poll, opts: &o.benchOpts, runID: newRunID(), n: o.n, sample: o.visibleSample}
	res := r.run(ctx)
	if err := a.printRegister(o, r.runID, &res); err != nil {
		return err
	}
	if res.stopped == stoppedInterrupted {
		return ctx.Err()
	}
	return checkErrorRate(&res.tally, o.maxErrorRate, "registration")
}

// registerReport is bench register's -o json.
type registerReport struct {
	URL            string         `json:"url"`
	Items          []string       `json:"items"`
	RunID          string         `json:"runId"`
	Concurrency    int            `json:"concurrency"`
	Stopped        string         `json:"stopped"`
	ElapsedSeconds float64        `json:"elapsedSeconds"`
	Total          int            `json:"total"`
	Accepted       int            `json:"accepted"`
	Errors         int            `json:"errors"`
	ErrorsByStatus map[string]int `json:"errorsByStatus"`
	ErrorRate      float64        `json:"errorRate"`
	PerSecond      float64        `json:"registrationsPerSecond"`
	Latency        Latency        `json:"latency"`
	Visible        visibleReport  `json:"visible"`
}

type visibleReport struct {
	Sampled    int     `json:"sampled"`
	Visible    int     `json:"visible"`
	NotVisible int     `json:"notVisible"`
	Latency    Latency `json:"latency"`
}

func (a *app) printRegister(o *registerOpts, runID string, res *registerResult) error {
	lat := Summarize(res.lat)
	vis := Summarize(res.visible)
	rate := perSecond(len(res.lat), res.elapsed)
	if a.wantJSON() {
		return a.printJSON(registerReport{
			URL: o.url, Items: o.items, RunID: runID, Concurrency: o.concurrency, Stopped: res.stopped,
			ElapsedSeconds: math.Round(res.elapsed.Seconds()*1000) / 1000, Total: res.sent, Accepted: len(res.lat),
			Errors: res.failed(), ErrorsByStatus: res.errors, ErrorRate: res.errorRate(), PerSecond: round2(rate),
			Latency: lat, Visible: visibleReport{Sampled: res.sampled, Visible: len(res.visible), NotVisible: res.notVisible, Latency: vis},
		})
	}
	w := a.out
	fmt.Fprintf(w, "bench register  %s  items=%s  concurrency=%d  run=%s\n", o.url, strings.Join(o.items, ","), o.concurrency, runID)
	fmt.Fprintf(w, "%-15s%s after %.3fs\n", "stopped", res.stopped, res.elapsed.Seconds())
	fmt.Fprintf(w, "%-15s%d\n", "total", res.sent)
	fmt.Fprintf(w, "%-15s%d\n", "accepted (202)", len(res.lat))
	writeErrors(w, "errors", &res.tally)
	fmt.Fprintf(w, "%-15s%.1f registrations/s\n", "throughput", rate)
	fmt.Fprintf(w, "%-15s%s\n", "latency 202", lat)
	if o.visibleSample == 0 {
		_, err := fmt.Fprintf(w, "%-15s%s\n", "visible", "off (--visible-sample 0)")
		return err
	}
	fmt.Fprintf(w, "%-15s%d sampled (every %d), %d WAITING, %d not visible within %s\n", "visible",
		res.sampled, o.visibleSample, len(res.visible), res.notVisible, o.visibleAfter)
	_, err := fmt.Fprintf(w, "%-15s%s\n", "reg->WAITING", vis)
	return err
}
