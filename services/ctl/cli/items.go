package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/itemcache"
	"github.com/waitroom/waitroom/topics"
)

// Bounds of an override, as the admin API has them, so a typo cannot open the
// floodgates whichever way the override goes.
const (
	maxRate      = 100_000
	maxActiveCap = 10_000_000
	maxTTL       = 24 * time.Hour
)

// newItemPolicy is the policy of an item `items set` creates over Kafka: the
// admin API's default for a new item.
var newItemPolicy = topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 1000, SessionTTLSeconds: 300}

// itemChange is what `items set` changes; nil fields stay as they are.
type itemChange struct {
	name       *string
	stock      *int64
	enabled    *bool
	rate       *float64
	maxActive  *int64
	sessionTTL *time.Duration
}

func (c *itemChange) validate() error {
	switch {
	case c.name == nil && c.stock == nil && c.enabled == nil && c.rate == nil && c.maxActive == nil && c.sessionTTL == nil:
		return usagef("nothing to change: give at least one of --name, --stock, --enabled, --rate, --max-active, --session-ttl")
	case c.name != nil && len(*c.name) > 200:
		return usagef("--name: longer than 200 bytes")
	case c.stock != nil && *c.stock < topics.Unlimited:
		return usagef("--stock %d: must be -1 (unlimited) or more", *c.stock)
	case c.rate != nil && (*c.rate < 0 || *c.rate > maxRate):
		return usagef("--rate %v: must be in 0..%d per second (0 pauses admission)", *c.rate, maxRate)
	case c.maxActive != nil && (*c.maxActive < 0 || *c.maxActive > maxActiveCap):
		return usagef("--max-active %d: must be in 0..%d (0 means no cap)", *c.maxActive, maxActiveCap)
	case c.sessionTTL != nil && (*c.sessionTTL < time.Second || *c.sessionTTL > maxTTL || *c.sessionTTL%time.Second != 0):
		return usagef("--session-ttl %s: must be whole seconds in 1s..24h", *c.sessionTTL)
	}
	return nil
}

// apply returns s with the change.
func (c *itemChange) apply(s topics.ItemState) topics.ItemState {
	if c.name != nil {
		s.Name = *c.name
	}
	if c.stock != nil {
		s.Stock = *c.stock
	}
	if c.enabled != nil {
		s.Enabled = *c.enabled
	}
	if c.rate != nil {
		s.Policy.RatePerSecond = *c.rate
	}
	if c.maxActive != nil {
		s.Policy.MaxActive = *c.maxActive
	}
	if c.sessionTTL != nil {
		s.Policy.SessionTTLSeconds = int64(*c.sessionTTL / time.Second)
	}
	return s
}

func (a *app) itemsCmd() *cobra.Command {
	var ko kafkaOpts
	var ao adminOpts
	var (
		name       string
		stock      int64
		enabled    bool
		rate       float64
		maxActive  int64
		sessionTTL time.Duration
	)
	set := &cobra.Command{
		Use:   "set <itemId>",
		Short: "Override an item's state or admission policy (a new version of its item event)",
		Long: `Override an item's state or admission policy; only the flags given change.

With an admin token (--admin-token or WR_ADMIN_TOKEN) it goes through the scheduler's
admin API, which publishes the new version to waitroom.items and applies it to Redis at
once (two versions when both state and policy flags are given). Without one it publishes
the item event to waitroom.items itself, as version current+1 read from the topic; the
consumer applies it within moments. An unknown item is created, enabled, with unlimited
stock, 10 admissions/s, max-active 1000 and a 5m session unless the flags say otherwise.`,
		Example: `  waitroomctl items set concert-2026 --rate 50 --max-active 2000
  waitroomctl items set concert-2026 --rate 0                  # pause admission
  waitroomctl items set concert-2026 --stock 0 --enabled=false
  WR_ADMIN_TOKEN=... waitroomctl items set concert-2026 --session-ttl 10m`,
		Args: exactArgs(1, "one <itemId>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			item := args[0]
			if !topics.ValidID(item) {
				return usagef("itemId %q is not %s", item, topics.IDRule)
			}
			f := cmd.Flags()
			var c itemChange
			if f.Changed("name") {
				c.name = &name
			}
			if f.Changed("stock") {
				c.stock = &stock
			}
			if f.Changed("enabled") {
				c.enabled = &enabled
			}
			if f.Changed("rate") {
				c.rate = &rate
			}
			if f.Changed("max-active") {
				c.maxActive = &maxActive
			}
			if f.Changed("session-ttl") {
				c.sessionTTL = &sessionTTL
			}
			if err := c.validate(); err != nil {
				return err
			}
			if ao.token != "" {
				if err := ao.validate(); err != nil {
					return err
				}
				return a.leaf(func(ctx context.Context) error { return a.setItemAdmin(ctx, &ao, item, &c) })(cmd, args)
			}
			if err := ko.validate(); err != nil {
				return err
			}
			return a.leaf(func(ctx context.Context) error { return a.setItemKafka(ctx, &ko, item, &c) })(cmd, args)
		},
	}
	f := set.Flags()
	f.StringVar(&name, "name", "", "display name")
	f.Int64Var(&stock, "stock", 0, "how many are left; -1 for unlimited, 0 sold out")
	f.BoolVar(&enabled, "enabled", true, "whether registrations are accepted (--enabled=false closes the line)")
	f.Float64Var(&rate, "rate", 0, "admissions per second; 0 pauses admission")
	f.Int64Var(&maxActive, "max-active", 0, "most people admitted at once; 0 means no cap")
	f.DurationVar(&sessionTTL, "session-ttl", 0, "how long an admission lasts (whole seconds, up to 24h)")
	a.adminFlags(set, &ao)
	g := group("items", "Override item state and admission policy", set)
	a.kafkaFlags(g, &ko)
	return g
}

// setItemKafka publishes the changed state of item to waitroom.items as the
// next version.
func (a *app) setItemKafka(ctx context.Context, o *kafkaOpts, item string, c *itemChange) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	base, err := a.base(ctx, o)
	if err != nil {
		return err
	}
	cache, err := itemcache.New(base, a.log)
	if err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = cache.Run(rctx) }()
	defer func() { stop(); <-done }()
	if err := cache.Sync(ctx); err != nil {
		return kafkaFailure("read "+topics.Items, o, err)
	}
	cur, found := cache.Get(item)
	if !found {
		cur = topics.ItemState{ItemID: item, Name: item, Stock: topics.Unlimited, Enabled: true, Policy: newItemPolicy}
	}
	next := c.apply(cur)
	next.V, next.ItemID, next.Version, next.UpdatedAt = topics.Version, item, cur.Version+1, time.Now().UnixMilli()
	if err := next.Validate(); err != nil {
		return usageError{err}
	}
	prod, err := kgo.NewClient(append(base, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))...)
	if err != nil {
		return fmt.Errorf("kafka producer: %w", err)
	}
	defer prod.Close()
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topics.Items, Key: []byte(item), Value: topics.Encode(&next)}).FirstErr(); err != nil {
		return kafkaFailure("publish to "+topics.Items+" (nothing changed)", o, err)
	}
	how := "published to " + topics.Items + "; the consumer applies it within moments"
	if !found {
		how = "new item " + how
	}
	return a.printItem(next, "kafka", how)
}

// setItemAdmin changes item through the admin API: state fields with POST
// .../items/:itemId, policy fields with PUT .../items/:itemId/admission.
func (a *app) setItemAdmin(ctx context.Context, o *adminOpts, item string, c *itemChange) error {
	cl := newAdminClient(o)
	path := "/items/" + url.PathEscape(item)
	var v itemView
	if c.name != nil || c.stock != nil || c.enabled != nil {
		body := struct {
			Name    *string `json:"name,omitempty"`
			Stock   *int64  `json:"stock,omitempty"`
			Enabled *bool   `json:"enabled,omitempty"`
		}{c.name, c.stock, c.enabled}
		if err := cl.do(ctx, http.MethodPost, path, body, &v); err != nil {
			return err
		}
	}
	if c.rate != nil || c.maxActive != nil || c.sessionTTL != nil {
		body := struct {
			RatePerSecond     *float64 `json:"ratePerSecond,omitempty"`
			MaxActive         *int64   `json:"maxActive,omitempty"`
			SessionTTLSeconds *int64   `json:"sessionTTLSeconds,omitempty"`
		}{RatePerSecond: c.rate, MaxActive: c.maxActive}
		if c.sessionTTL != nil {
			s := int64(*c.sessionTTL / time.Second)
			body.SessionTTLSeconds = &s
		}
		if err := cl.do(ctx, http.MethodPut, path+"/admission", body, &v); err != nil {
			return err
		}
	}
	s := topics.ItemState{V: topics.Version, ItemID: v.ItemID, Name: v.Name, Stock: v.Stock, Enabled: v.Enabled, Version: v.Version, UpdatedAt: v.UpdatedAt,
		Policy: topics.AdmissionPolicy{RatePerSecond: v.Policy.RatePerSecond, MaxActive: v.Policy.MaxActive, SessionTTLSeconds: v.Policy.SessionTTLSeconds}}
	return a.printItem(s, "admin", "applied through the admin API at "+o.url+" (published to "+topics.Items+" and in Redis now)")
}

func (a *app) printItem(s topics.ItemState, via, how string) error {
	if a.wantJSON() {
		return a.printJSON(struct {
			Via  string           `json:"via"`
			Item topics.ItemState `json:"item"`
		}{via, s})
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	stock := strconv.FormatInt(s.Stock, 10)
	if s.Stock == topics.Unlimited {
		stock = "unlimited"
	}
	rate := strconv.FormatFloat(s.Policy.RatePerSecond, 'f', -1, 64) + "/s"
	if s.Policy.RatePerSecond == 0 {
		rate = "0 (paused)"
	}
	for _, r := range [][2]string{
		{"item", s.ItemID}, {"version", strconv.FormatInt(s.Version, 10)}, {"name", s.Name}, {"stock", stock},
		{"enabled", strconv.FormatBool(s.Enabled)}, {"rate", rate},
		{"max-active", strconv.FormatInt(s.Policy.MaxActive, 10)},
		{"session-ttl", (time.Duration(s.Policy.SessionTTLSeconds) * time.Second).String()},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(a.out, how)
	return err
}

// kafkaFailure says what failed and where, and what to check.
func kafkaFailure(what string, o *kafkaOpts, err error) error {
	return fmt.Errorf("%s on %v: %w (is Kafka reachable? --brokers or WR_KAFKA_BROKERS; --timeout %s)", what, o.brokers, err, o.timeout)
}
