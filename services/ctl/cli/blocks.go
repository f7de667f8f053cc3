package cli

import (
	"context"
	"fmt"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// blockView is a block as the admin API shows it (services/scheduler/admin.BlockView).
type blockView struct {
	Subject string `json:"subject"`
	Reason  string `json:"reason,omitempty"`
	Until   int64  `json:"until,omitempty"`
	At      int64  `json:"at"`
	Active  bool   `json:"active"`
}

type blocksOpts struct {
	admin  adminOpts
	reason string
	dur    time.Duration
}

func (a *app) blocksCmd() *cobra.Command {
	mk := func(use, short, long, example string, args cobra.PositionalArgs, run func(ctx context.Context, o *blocksOpts, args []string) error, more func(*cobra.Command, *blocksOpts)) *cobra.Command {
		var o blocksOpts
		cmd := &cobra.Command{Use: use, Short: short, Long: long, Example: example, Args: args,
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := o.admin.validate(); err != nil {
					return err
				}
				if o.admin.token == "" {
					return usagef("blocks use the scheduler's admin API, which needs the admin token: set --admin-token or WR_ADMIN_TOKEN")
				}
				if o.dur < 0 {
					return usagef("--for %s: must not be negative", o.dur)
				}
				return a.leaf(func(ctx context.Context) error { return run(ctx, &o, args) })(cmd, args)
			}}
		a.adminFlags(cmd, &o.admin)
		if more != nil {
			more(cmd, &o)
		}
		return cmd
	}
	add := mk("add SUBJECT", "Block a user (user:<userId>) or an address range (ip:<cidr> or ip:<address>)",
		`Block a userId or an IP range: the block is recorded on waitroom.blocks and every api
replica refuses the subject's registrations with 403 BLOCKED naming the reason; a blocked
user's status answers BLOCKED and its admission no longer verifies. --for ends it by itself.`,
		"  waitroomctl blocks add user:mallory --reason 'ticket bot'\n  waitroomctl blocks add ip:203.0.113.0/24 --reason 'scalper farm' --for 24h",
		cobra.ExactArgs(1), a.addBlock, func(cmd *cobra.Command, o *blocksOpts) {
			cmd.Flags().StringVar(&o.reason, "reason", "", "why (the refused client reads it)")
			cmd.Flags().DurationVar(&o.dur, "for", 0, "end the block after this long (0: until lifted)")
		})
	rm := mk("rm SUBJECT", "Lift a block", "Lift the block on SUBJECT (a tombstone on waitroom.blocks).",
		"  waitroomctl blocks rm ip:203.0.113.0/24", cobra.ExactArgs(1), a.liftBlock, nil)
	ls := mk("ls", "List the blocks", "List every block the topic holds; ACTIVE is no once a block's end has passed.",
		"  waitroomctl blocks ls", cobra.NoArgs, a.listBlocks, nil)
	return group("blocks", "Block users and address ranges (BLOCKED), through the admin API", add, rm, ls)
}

func (a *app) addBlock(ctx context.Context, o *blocksOpts, args []string) error {
	body := map[string]any{"subject": args[0], "reason": o.reason}
	if o.dur > 0 {
		body["forSeconds"] = int64((o.dur + time.Second - 1) / time.Second)
	}
	var b blockView
	if err := newAdminClient(&o.admin).do(ctx, "POST", "/blocks", body, &b); err != nil {
		return err
	}
	return a.printBlocks([]blockView{b})
}

func (a *app) liftBlock(ctx context.Context, o *blocksOpts, args []string) error {
	var out struct {
		Lifted string `json:"lifted"`
	}
	if err := newAdminClient(&o.admin).do(ctx, "DELETE", "/blocks?subject="+url.QueryEscape(args[0]), nil, &out); err != nil {
		return err
	}
	if a.wantJSON() {
		return a.printJSON(out)
	}
	_, err := fmt.Fprintf(a.out, "lifted %s\n", out.Lifted)
	return err
}

func (a *app) listBlocks(ctx context.Context, o *blocksOpts, _ []string) error {
	var out struct {
		Blocks []blockView `json:"blocks"`
	}
	if err := newAdminClient(&o.admin).do(ctx, "GET", "/blocks", nil, &out); err != nil {
		return err
	}
	return a.printBlocks(out.Blocks)
}

func (a *app) printBlocks(bs []blockView) error {
	if a.wantJSON() {
		return a.printJSON(bs)
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tACTIVE\tUNTIL\tSET\tREASON")
	for _, b := range bs {
		until := "lifted by hand"
		if b.Until > 0 {
			until = time.UnixMilli(b.Until).UTC().Format(time.RFC3339)
		}
		active := "yes"
		if !b.Active {
			active = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", b.Subject, active, until, time.UnixMilli(b.At).UTC().Format(time.RFC3339), b.Reason)
	}
	return tw.Flush()
}
