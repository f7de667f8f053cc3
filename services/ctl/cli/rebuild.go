package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/waitroom/waitroom/pkg/kafka/fence"
	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
)

type rebuildOpts struct {
	kafkaOpts
	redisAddr string
	reason    string
	settle    time.Duration
	items     []string
}

func (a *app) rebuildCmd() *cobra.Command {
	o := &rebuildOpts{}
	cmd := &cobra.Command{
		Use:   "rebuild",
		Short: "Rebuild the Redis view from the Kafka topics (every service answers VIEW_REBUILDING meanwhile)",
		Long: `Rebuild the Redis view from the record: replay waitroom.items, waitroom.admissions
and waitroom.registrations up to their current ends and write every item's line
exactly as it was (seq and position of every token, admitted people with their
expiries, left and completed people, applied offsets, the pace), fenced above
every scheduler epoch on the record. The consumer does this by itself when it
finds Redis empty or older than the record; this command forces it.

While it runs the view is marked rebuilding: registrations are still accepted
(202), status, verify, complete and streams answer 503 VIEW_REBUILDING, the
scheduler admits nobody. Records produced meanwhile are applied afterwards.

With --items, only those items are rebuilt (what the consumer does by itself
for the items of a Redis Cluster node that restarted empty): they alone
answer VIEW_REBUILDING, the view's marker and every other item are untouched.`,
		Args: cobra.NoArgs,
		RunE: a.leaf(func(ctx context.Context) error {
			if err := o.validate(); err != nil {
				return err
			}
			return a.runRebuild(ctx, o)
		}),
	}
	a.kafkaFlags(cmd, &o.kafkaOpts)
	cmd.Flags().StringVar(&o.redisAddr, "redis", a.redisDefault(), redisFlagHelp)
	cmd.Flags().StringVar(&o.reason, "reason", "waitroomctl rebuild", "why, shown by every service's /readyz while it runs")
	cmd.Flags().DurationVar(&o.settle, "settle", time.Second, "wait this long after marking the view rebuilding, so every service stops writing")
	cmd.Flags().StringSliceVar(&o.items, "items", nil, "rebuild only these items (comma-separated); the rest of the view is served throughout")
	return cmd
}

func (o *rebuildOpts) validate() error {
	if err := o.kafkaOpts.validate(); err != nil {
		return err
	}
	if o.redisAddr == "" {
		return usagef("--redis: an address is needed")
	}
	return nil
}

func (a *app) runRebuild(ctx context.Context, o *rebuildOpts) error {
	base, err := a.base(ctx, &o.kafkaOpts)
	if err != nil {
		return err
	}
	rdb, err := a.redisAt(o.redisAddr, 8)
	if err != nil {
		return err
	}
	defer rdb.Close()
	rep, err := rebuild.New(rdb, base, a.log).WithFence(cmp.Or(a.env.SchedulerTxnID, fence.DefaultPrefix)).Run(ctx, rebuild.Options{Reason: o.reason, Settle: o.settle, Items: o.items})
	if errors.Is(err, rebuild.ErrLocked) {
		return fmt.Errorf("%w (the consumer may be rebuilding already)", err)
	}
	if err != nil {
		return err
	}
	if a.wantJSON() {
		return a.printJSON(map[string]any{"gen": rep.Gen, "records": rep.Records, "items": rep.Items, "waiting": rep.Waiting,
			"admitted": rep.Admitted, "epoch": rep.Epoch, "seconds": rep.Took.Seconds()})
	}
	rate := float64(rep.Records) / max(rep.Took.Seconds(), 1e-9)
	fmt.Fprintf(a.out, "view rebuilt: generation %s, %d records in %s (%.0f records/s), %d items, %d waiting, %d admitted, epoch fenced at %d\n",
		rep.Gen, rep.Records, rep.Took.Round(time.Millisecond), rate, rep.Items, rep.Waiting, rep.Admitted, rep.Epoch)
	return nil
}
