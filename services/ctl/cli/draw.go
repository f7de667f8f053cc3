package cli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// ErrDrawInvalid is returned by draw verify when a draw does not verify or
// the live line disagrees with the recomputation (exit 1).
var ErrDrawInvalid = errors.New("a draw does not verify")

type drawOpts struct {
	kafkaOpts
	item      string
	redisAddr string // --live: compare with the line in this Redis
	live      bool
	order     bool
}

func (a *app) drawCmd() *cobra.Command {
	o := &drawOpts{}
	verify := &cobra.Command{
		Use:   "verify",
		Short: "Recompute an item's draws from the topics and check each revealed seed against the item's commitment",
		Long: `Read waitroom.items (the item's drawCommit) and every record of the item on
waitroom.registrations, and recompute each draw as anyone can: the pooled
registrations (a register whose window is above the last drawn one) of
windows up to the draw's, ordered by sha256(seed bytes || tokenId bytes)
ascending; the seed must hash to the commitment in its round
(sha256 applied round times). Prints each draw (window, round, seed, how many
it placed, verified or why not); --order prints the placements; --live
compares them with the line in Redis: the tokens of each draw still waiting
must stand in the drawn order. Exit 1 when a draw does not verify or the
line disagrees.`,
		Args: cobra.NoArgs,
		RunE: a.leaf(func(ctx context.Context) error {
			if err := o.kafkaOpts.validate(); err != nil {
				return err
			}
			if !topics.ValidID(o.item) {
				return usagef("--item: %q is not an item id (%s)", o.item, topics.IDRule)
			}
			return a.runDrawVerify(ctx, o)
		}),
	}
	a.kafkaFlags(verify, &o.kafkaOpts)
	verify.Flags().StringVar(&o.item, "item", "", "the item whose draws to verify")
	verify.Flags().BoolVar(&o.order, "order", false, "print every placement: draw, rank, tokenId")
	verify.Flags().BoolVar(&o.live, "live", false, "compare with the line in Redis (--redis)")
	verify.Flags().StringVar(&o.redisAddr, "redis", a.redisDefault(), redisFlagHelp)
	return group("draw", "Audit the committed-seed draws of pre-queues and random mode", verify)
}

// readTopic calls fn with every record of topic up to its current end, in
// partition order.
func readTopic(ctx context.Context, base []kgo.Opt, topic string, fn func(*kgo.Record) error) error {
	byPart := map[int32][]*kgo.Record{}
	err := kclient.ReadToEnd(ctx, base, topic, func(r *kgo.Record) error {
		byPart[r.Partition] = append(byPart[r.Partition], r)
		return nil
	})
	if err != nil {
		return err
	}
	for p := int32(0); len(byPart) > 0; p++ {
		for _, r := range byPart[p] {
			if err := fn(r); err != nil {
				return err
			}
		}
		delete(byPart, p)
	}
	return nil
}

func (a *app) runDrawVerify(ctx context.Context, o *drawOpts) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	base, err := a.base(ctx, &o.kafkaOpts)
	if err != nil {
		return err
	}
	commit, err := readDrawCommit(ctx, base, o.item)
	if err != nil {
		return err
	}
	au, err := readDrawAudit(ctx, base, o.item, commit)
	if err != nil {
		return err
	}
	bad := 0
	live := make([]string, len(au.Draws)) // per draw: what the line says
	if o.live {
		if bad, err = a.compareLive(ctx, o, au, live); err != nil {
			return err
		}
	}
	for _, d := range au.Draws {
		if d.Err != nil {
			bad++
		}
	}
	if a.wantJSON() {
		err = a.printDrawsJSON(o, commit, au, live)
	} else {
		err = a.printDraws(o, commit, au, live)
	}
	if err != nil {
		return err
	}
	if bad > 0 {
		return fmt.Errorf("%w: %d of %d draws of %s", ErrDrawInvalid, bad, len(au.Draws), o.item)
	}
	return nil
}

// readDrawCommit is item's drawCommit in its last event on waitroom.items.
func readDrawCommit(ctx context.Context, base []kgo.Opt, item string) (string, error) {
	var commit string
	found := false
	err := readTopic(ctx, base, topics.Items, func(r *kgo.Record) error {
		if string(r.Key) != item || r.Value == nil {
			return nil
		}
		if s, err := topics.DecodeItem(r.Value); err == nil {
			commit, found = s.DrawCommit, true
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if !found {
		return "", fmt.Errorf("no item %s on %s", item, topics.Items)
	}
	return commit, nil
}

// readDrawAudit recomputes item's draws from its records on
// waitroom.registrations.
func readDrawAudit(ctx context.Context, base []kgo.Opt, item, commit string) (*draw.Audit, error) {
	au := draw.NewAudit(commit)
	err := readTopic(ctx, base, topics.Registrations, func(r *kgo.Record) error {
		if string(r.Key) != item {
			return nil
		}
		ev, err := topics.DecodeRegistration(r.Value)
		if err != nil || ev.ItemID != item {
			return nil // dead-lettered by the consumer: no part of the line
		}
		switch ev.Kind {
		case topics.KindRegister:
			au.Register(ev.UserID, ev.TokenID, ev.Window)
		case topics.KindLeave, topics.KindAbandon:
			au.Leave(ev.UserID)
		case topics.KindDraw:
			au.Draw(ev.Draw.Window, ev.Draw.Round, ev.Draw.Seed, ev.Draw.Commit, r.Offset)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return au, nil
}

// compareLive writes into live, per draw, what the line in Redis says of its
// tokens still waiting, and returns how many draws it finds out of order.
func (a *app) compareLive(ctx context.Context, o *drawOpts, au *draw.Audit, live []string) (int, error) {
	rdb, err := a.redisAt(o.redisAddr, 2)
	if err != nil {
		return 0, err
	}
	defer rdb.Close()
	k := queue.KeysFor(o.item)
	bad := 0
	for i, d := range au.Draws {
		if d.Order == nil {
			continue
		}
		var seqs []float64
		for lo := 0; lo < len(d.Order); lo += 1000 {
			part, err := rdb.ZMScore(ctx, k.Waiting, d.Order[lo:min(lo+1000, len(d.Order))]...).Result()
			if err != nil {
				return 0, fmt.Errorf("read the line of %s: %w", o.item, err)
			}
			seqs = append(seqs, part...)
		}
		waiting, inOrder := stillInOrder(seqs)
		live[i] = fmt.Sprintf("%d waiting, in the drawn order", waiting)
		if !inOrder {
			live[i] = fmt.Sprintf("%d waiting, NOT in the drawn order", waiting)
			bad++
		}
	}
	return bad, nil
}

// stillInOrder counts the tokens of a draw still waiting (a line seq above
// 0, in the drawn order) and says whether their seqs still rise.
func stillInOrder(seqs []float64) (waiting int, inOrder bool) {
	inOrder, prev := true, 0.0
	for _, s := range seqs {
		if s == 0 {
			continue // admitted or gone since
		}
		waiting++
		if s < prev {
			inOrder = false
		}
		prev = s
	}
	return waiting, inOrder
}

func (a *app) printDrawsJSON(o *drawOpts, commit string, au *draw.Audit, live []string) error {
	type out struct {
		Window int64    `json:"window"`
		Round  int64    `json:"round"`
		Seed   string   `json:"seed"`
		Commit string   `json:"commit"`
		Offset int64    `json:"offset"`
		Placed int      `json:"placed"`
		Error  string   `json:"error,omitempty"`
		Live   string   `json:"live,omitempty"`
		Order  []string `json:"order,omitempty"`
	}
	res := make([]out, len(au.Draws))
	for i, d := range au.Draws {
		res[i] = out{Window: d.Window, Round: d.Round, Seed: d.Seed, Commit: d.Commit, Offset: d.Offset, Placed: len(d.Order), Live: live[i]}
		if d.Err != nil {
			res[i].Error = d.Err.Error()
		}
		if o.order {
			res[i].Order = d.Order
		}
	}
	return a.printJSON(map[string]any{"item": o.item, "commit": commit, "draws": res, "pooled": len(au.Pooled())})
}

func (a *app) printDraws(o *drawOpts, commit string, au *draw.Audit, live []string) error {
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "item %s, commitment %s, %d draws, %d waiting for a draw\n", o.item, commit, len(au.Draws), len(au.Pooled()))
	fmt.Fprintln(tw, "OFFSET\tWINDOW\tROUND\tSEED\tPLACED\tVERIFIED\tLIVE")
	for i, d := range au.Draws {
		ok := "yes"
		if d.Err != nil {
			ok = "NO: " + d.Err.Error()
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%d\t%s\t%s\n", d.Offset, d.Window, d.Round, d.Seed, len(d.Order), ok, live[i])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if o.order {
		for _, d := range au.Draws {
			for rank, tok := range d.Order {
				fmt.Fprintf(a.out, "%d\t%d\t%s\n", d.Window, rank+1, tok)
			}
		}
	}
	return nil
}
