package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

func (a *app) bypassCmd() *cobra.Command {
	return group("bypass", "Operator bypass codes: issue, count and audit their uses", a.bypassIssueCmd(), a.bypassUsesCmd(), a.bypassAuditCmd())
}

func (a *app) bypassIssueCmd() *cobra.Command {
	var ao adminOpts
	var count int64
	var ttl time.Duration
	issue := &cobra.Command{
		Use:   "issue <itemId>",
		Short: "Issue a signed bypass code: its holders are admitted at the next tick, up to --count registrations until --ttl",
		Long: `Issue a bypass code through a scheduler's admin API (which holds WR_BYPASS_KEY). A
registration that carries it ({"bypass":"<code>"}) skips the proof-of-work and is
admitted at the next tick, ahead of the line and past the rate, while the code has
uses left; later ones are refused 403 BYPASS_EXHAUSTED. Each use is a register record
on waitroom.registrations ('bypass audit' lists them).`,
		Example: `  WR_ADMIN_TOKEN=... waitroomctl bypass issue concert-2026 --count 20 --ttl 48h`,
		Args:    exactArgs(1, "one <itemId>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !topics.ValidID(args[0]) {
				return usagef("itemId %q is not %s", args[0], topics.IDRule)
			}
			if count < 1 {
				return usagef("--count %d: must be at least 1", count)
			}
			if ttl < time.Second || ttl%time.Second != 0 {
				return usagef("--ttl %s: must be whole seconds, at least 1s", ttl)
			}
			if err := ao.validate(); err != nil {
				return err
			}
			if ao.token == "" {
				return usagef("--admin-token (or WR_ADMIN_TOKEN) is needed: codes are signed by the scheduler")
			}
			return a.leaf(func(ctx context.Context) error { return a.runBypassIssue(ctx, &ao, args[0], count, ttl) })(cmd, args)
		},
	}
	issue.Flags().Int64Var(&count, "count", 1, "how many registrations the code admits")
	issue.Flags().DurationVar(&ttl, "ttl", 24*time.Hour, "how long the code is valid")
	a.adminFlags(issue, &ao)
	return issue
}

// runBypassIssue asks the admin API for a code of item for count
// registrations within ttl, and prints it.
func (a *app) runBypassIssue(ctx context.Context, ao *adminOpts, item string, count int64, ttl time.Duration) error {
	var out struct {
		Code      string `json:"code"`
		ID        string `json:"id"`
		ItemID    string `json:"itemId"`
		Count     int64  `json:"count"`
		ExpiresAt string `json:"expiresAt"`
	}
	body := map[string]int64{"count": count, "ttlSeconds": int64(ttl / time.Second)}
	if err := newAdminClient(ao).do(ctx, http.MethodPost, "/items/"+url.PathEscape(item)+"/bypass", body, &out); err != nil {
		return err
	}
	if a.wantJSON() {
		return a.printJSON(out)
	}
	_, err := fmt.Fprintf(a.out, "%s\n\nid %s, item %s, %d registrations, expires %s\n", out.Code, out.ID, out.ItemID, out.Count, out.ExpiresAt)
	return err
}

func (a *app) bypassUsesCmd() *cobra.Command {
	var uo adminOpts
	uses := &cobra.Command{
		Use:   "uses <itemId>",
		Short: "How many registrations each bypass code of an item placed (from the line)",
		Args:  exactArgs(1, "one <itemId>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := uo.validate(); err != nil {
				return err
			}
			return a.leaf(func(ctx context.Context) error { return a.runBypassUses(ctx, &uo, args[0]) })(cmd, args)
		},
	}
	a.adminFlags(uses, &uo)
	return uses
}

// runBypassUses prints how many registrations each code of item placed,
// by code.
func (a *app) runBypassUses(ctx context.Context, uo *adminOpts, item string) error {
	var out struct {
		Uses map[string]int64 `json:"uses"`
	}
	if err := newAdminClient(uo).do(ctx, http.MethodGet, "/items/"+url.PathEscape(item)+"/bypass", nil, &out); err != nil {
		return err
	}
	if a.wantJSON() {
		return a.printJSON(out)
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CODE\tUSES")
	codes := make([]string, 0, len(out.Uses))
	for c := range out.Uses {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	for _, c := range codes {
		fmt.Fprintf(tw, "%s\t%d\n", c, out.Uses[c])
	}
	return tw.Flush()
}

func (a *app) bypassAuditCmd() *cobra.Command {
	var ko kafkaOpts
	var item string
	var ro redisOpts
	audit := &cobra.Command{
		Use:   "audit --item <itemId>",
		Short: "List every registration that carried a bypass code, from waitroom.registrations (the record)",
		Long: `Read waitroom.registrations from its start to its end now and list each register
record of the item that carried a bypass code: when, which code, which user and
token, from which address, at which partition/offset, and what the line made of
it: the token's state in the Redis view (--redis). A use that was never placed
(the code's count was spent, the code had expired, the user already held a place)
reads REJECTED or DUPLICATE; the line's own scripts decided it, this command
only reads their answer.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !topics.ValidID(item) {
				return usagef("--item %q is not %s", item, topics.IDRule)
			}
			if err := ko.validate(); err != nil {
				return err
			}
			if ro.addr == "" {
				return usagef("--redis: an address is needed (the view says which uses were placed)")
			}
			return a.leaf(func(ctx context.Context) error { return a.bypassAudit(ctx, &ko, &ro, item) })(cmd, args)
		},
	}
	audit.Flags().StringVar(&item, "item", "", "the item")
	audit.Flags().StringVar(&ro.addr, "redis", a.redisDefault(), redisFlagHelp)
	a.kafkaFlags(audit, &ko)
	return audit
}

// bypassUse is one audited use.
type bypassUse struct {
	At        string `json:"at"`
	Code      string `json:"code"`
	Count     int64  `json:"count"`
	UserID    string `json:"userId"`
	TokenID   string `json:"tokenId"`
	IP        string `json:"ip,omitempty"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	key       string // its place key (topics.PlaceKey)
	// State is the token's state in the view (line.Status); Placed is
	// whether the use ever held a place in the line.
	State  string `json:"state"`
	Placed bool   `json:"placed"`
}

// heldPlace reports whether a token in state s was ever placed in the line.
func heldPlace(s line.State) bool {
	switch s {
	case line.Waiting, line.Admitted, line.LeftLine, line.Completed, line.Gone, line.Abandoned, line.Pooled, line.Late:
		return true
	}
	return false
}

func (a *app) bypassAudit(ctx context.Context, ko *kafkaOpts, ro *redisOpts, item string) error {
	ctx, cancel := context.WithTimeout(ctx, ko.timeout)
	defer cancel()
	base, err := a.base(ctx, ko)
	if err != nil {
		return err
	}
	out, err := readBypassUses(ctx, base, item)
	if err != nil {
		return err
	}
	// One item lives on one partition: offset order is the order the line applied.
	sort.Slice(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	if len(out) > 0 {
		if err := a.readUseStates(ctx, ro, item, out); err != nil {
			return err
		}
	}
	if a.wantJSON() {
		return a.printJSON(out)
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tCODE\tUSER\tTOKEN\tIP\tPARTITION/OFFSET\tSTATE\tPLACED")
	for _, u := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%v\n", u.At, u.Code, u.UserID, u.TokenID, u.IP, u.Partition, u.Offset, u.State, u.Placed)
	}
	return tw.Flush()
}

// readBypassUses reads waitroom.registrations from its start to its end now
// and returns item's register records that carried a bypass code.
func readBypassUses(ctx context.Context, base []kgo.Opt, item string) ([]bypassUse, error) {
	var out []bypassUse
	err := kclient.ReadToEnd(ctx, base, topics.Registrations, func(r *kgo.Record) error {
		if u, ok := bypassUseOf(r, item); ok {
			out = append(out, u)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// bypassUseOf is the use r records, if r is a register record of item that
// carried a bypass code.
func bypassUseOf(r *kgo.Record, item string) (bypassUse, bool) {
	if string(r.Key) != item {
		return bypassUse{}, false
	}
	ev, err := topics.DecodeRegistration(r.Value)
	if err != nil || ev.Kind != topics.KindRegister || ev.Bypass == nil {
		return bypassUse{}, false
	}
	u := bypassUse{At: time.UnixMilli(ev.RequestedAt).UTC().Format(time.RFC3339Nano), Code: ev.Bypass.Code, Count: ev.Bypass.Count,
		UserID: ev.UserID, TokenID: ev.TokenID, Partition: r.Partition, Offset: r.Offset, key: ev.PlaceKey()}
	if ev.Client != nil {
		u.IP = ev.Client.IP
	}
	return u, true
}

// readUseStates fills each use's state in the Redis view at ro and whether
// it was ever placed.
func (a *app) readUseStates(ctx context.Context, ro *redisOpts, item string, out []bypassUse) error {
	rdb, err := a.redisAt(ro.addr, 2)
	if err != nil {
		return err
	}
	defer rdb.Close()
	l := queue.New(rdb)
	for i := range out {
		u := &out[i]
		st, err := l.Status(ctx, item, u.key, u.TokenID, u.Partition, u.Offset)
		if err != nil {
			return fmt.Errorf("read the state of %s in the view: %w", u.TokenID, err)
		}
		u.State, u.Placed = string(st.State), heldPlace(st.State)
	}
	return nil
}
