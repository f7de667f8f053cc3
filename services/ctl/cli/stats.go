package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

type statsOpts struct {
	admin    adminOpts
	watch    bool
	interval time.Duration
}

func (a *app) statsCmd() *cobra.Command {
	var o statsOpts
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show every item's line: waiting, admitted, head, admission rate (needs the admin token; --watch refreshes like top)",
		Long: `Show every item's line as the scheduler's admin API reads it from Redis: people waiting,
admitted (admissions not yet expired), head (the highest sequence admitted), registered
(sequences given out), admitted in the last minute, and the item's policy.

Needs the admin token (--admin-token or WR_ADMIN_TOKEN). With --watch it redraws every
--interval until Ctrl-C; with -o json it prints one JSON object per refresh.`,
		Example: "  WR_ADMIN_TOKEN=... waitroomctl stats\n  waitroomctl stats --watch --interval 1s --admin-url http://10.0.0.5:8082",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.admin.validate(); err != nil {
				return err
			}
			if o.admin.token == "" {
				return usagef("stats reads the scheduler's admin API, which needs the admin token: set --admin-token or WR_ADMIN_TOKEN to the scheduler's WR_ADMIN_TOKEN (make run prints it)")
			}
			if o.interval < 100*time.Millisecond {
				return usagef("--interval %s: must be at least 100ms", o.interval)
			}
			return a.leaf(func(ctx context.Context) error { return a.runStats(ctx, &o) })(cmd, args)
		},
	}
	a.adminFlags(cmd, &o.admin)
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "refresh every --interval until Ctrl-C")
	cmd.Flags().DurationVar(&o.interval, "interval", 2*time.Second, "time between two refreshes with --watch")
	return cmd
}

// statsSnapshot is one refresh, as -o json prints it.
type statsSnapshot struct {
	At    time.Time  `json:"at"`
	Items []itemView `json:"items"`
}

func (a *app) runStats(ctx context.Context, o *statsOpts) error {
	cl := newAdminClient(&o.admin)
	fetch := func() (statsSnapshot, error) {
		var r struct {
			Items []itemView `json:"items"`
		}
		err := cl.do(ctx, http.MethodGet, "/items", nil, &r)
		if r.Items == nil {
			r.Items = []itemView{}
		}
		return statsSnapshot{At: time.Now().UTC(), Items: r.Items}, err
	}
	if !o.watch {
		snap, err := fetch()
		if err != nil {
			return err
		}
		if a.wantJSON() {
			return a.printJSON(snap)
		}
		return a.printStats(snap)
	}
	t := time.NewTicker(o.interval)
	defer t.Stop()
	for {
		snap, err := fetch()
		if ctx.Err() != nil {
			return nil // Ctrl-C ends a watch normally
		}
		switch {
		case a.wantJSON() && err == nil:
			if err := json.NewEncoder(a.out).Encode(snap); err != nil {
				return err
			}
		case a.wantJSON():
			fmt.Fprintf(a.out, "{\"at\":%q,\"error\":%q}\n", snap.At.Format(time.RFC3339), err.Error())
		default:
			fmt.Fprint(a.out, "\x1b[H\x1b[2J") // home, clear: redraw in place like top
			fmt.Fprintf(a.out, "waitroom stats  %s  every %s (Ctrl-C to stop)\n\n", snap.At.Format("15:04:05"), o.interval)
			if err != nil {
				fmt.Fprintf(a.out, "error: %v\n(retrying)\n", err)
			} else if err := a.printStats(snap); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (a *app) printStats(s statsSnapshot) error {
	if len(s.Items) == 0 {
		_, err := fmt.Fprintln(a.out, "no items (the product service or 'waitroomctl items set' publishes them)")
		return err
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ITEM\tSTATE\tRATE/S\tMAX-ACTIVE\tWAITING\tADMITTED\tHEAD\tREGISTERED\tADMITTED/MIN\t")
	var tot itemView
	for _, v := range s.Items {
		state := "open"
		switch {
		case !v.Enabled:
			state = "closed"
		case v.Stock == 0:
			state = "sold-out"
		case v.Paused:
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", v.ItemID, state,
			strconv.FormatFloat(v.Policy.RatePerSecond, 'f', -1, 64), v.Policy.MaxActive,
			v.Waiting, v.Admitted, v.Head, v.Seq, v.AdmittedLastMinute)
		tot.Waiting += v.Waiting
		tot.Admitted += v.Admitted
		tot.Seq += v.Seq
		tot.AdmittedLastMinute += v.AdmittedLastMinute
	}
	fmt.Fprintf(tw, "TOTAL (%d)\t\t\t\t%d\t%d\t\t%d\t%d\t\n", len(s.Items), tot.Waiting, tot.Admitted, tot.Seq, tot.AdmittedLastMinute)
	return tw.Flush()
}
