package cli

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/itempatch"
	"github.com/waitroom/waitroom/pkg/kafka/itemcache"
	"github.com/waitroom/waitroom/topics"
)

// flagOf names the flag of each patch field, for errors.
var flagOf = map[string]string{
	"name": "--name", "stock": "--stock", "enabled": "--enabled", "ratePerSecond": "--rate",
	"maxActive": "--max-active", "sessionTTLSeconds": "--session-ttl", "paused": "--paused",
	"mode": "--mode", "rejectMessage": "--reject-message", "notice": "--notice", "template": "--template-file", "templates": "--template-lang",
	"powDifficulty":      "--pow-difficulty",
	"idleTimeoutSeconds": "--idle-timeout",
	"opensAt":            "--opens-at", "drawWindowSeconds": "--draw-window",
}

// checkPatch refuses an empty patch and names the flag of a field out of bounds.
func checkPatch(c *itempatch.Patch) error {
	if c.Empty() {
		return usagef("nothing to change: give at least one of --name, --stock, --enabled, --rate, --max-active, --session-ttl, --paused, --mode, --reject-message, --notice, --template-file, --template-lang, --idle-timeout, --pow-difficulty, --opens-at, --draw-window")
	}
	if err := c.Check(); err != nil {
		return usagef("%s %s", flagOf[err.Field], err.Problem)
	}
	return nil
}

func (a *app) itemsCmd() *cobra.Command {
	var ko kafkaOpts
	g := group("items", "Override item state and admission policy", a.itemsSetCmd(&ko))
	a.kafkaFlags(g, &ko)
	return g
}

// setItemOpts are the flags of items set.
type setItemOpts struct {
	name       string
	stock      int64
	enabled    bool
	rate       float64
	maxActive  int64
	sessionTTL time.Duration
	paused     bool
	mode       string
	rejectMsg  string
	notice     string
	tplFile    string
	tplLang    []string
	powBits    int
	idle       time.Duration
	opensAt    string
	drawWindow time.Duration
}

// itemsSetCmd is items set; ko are the items group's Kafka flags.
func (a *app) itemsSetCmd(ko *kafkaOpts) *cobra.Command {
	var o setItemOpts
	var ao adminOpts
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
  waitroomctl items set concert-2026 --paused                  # pause admission, keep the rate
  waitroomctl items set concert-2026 --paused=false            # resume at the rate it had
  waitroomctl items set concert-2026 --mode passthrough        # the room off: everyone in, still counted
  waitroomctl items set concert-2026 --mode auto               # invisible until a line forms (the kit's auto entry)
  waitroomctl items set concert-2026 --mode reject --reject-message "Back at 10:00"
  waitroomctl items set concert-2026 --idle-timeout 2m         # release places nobody polls or streams for 2m
  waitroomctl items set concert-2026 --opens-at 2026-12-01T10:00:00Z   # pre-queue until then, then a draw
  waitroomctl items set concert-2026 --mode random --draw-window 1m    # a lottery every minute
  waitroomctl items set concert-2026 --stock 0 --enabled=false
  waitroomctl items set concert-2026 --template-file page.html --template-lang ko=page.ko.html   # a page for all, one for Korean readers
  waitroomctl items set concert-2026 --pow-difficulty 18        # ask each registration a proof-of-work
  WR_ADMIN_TOKEN=... waitroomctl items set concert-2026 --session-ttl 10m`,
		Args: exactArgs(1, "one <itemId>"),
		RunE: func(cmd *cobra.Command, args []string) error { return a.runItemsSet(cmd, args, &o, &ao, ko) },
	}
	o.flags(set)
	a.adminFlags(set, &ao)
	return set
}

func (o *setItemOpts) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.name, "name", "", "display name")
	f.Int64Var(&o.stock, "stock", 0, "how many are left; -1 for unlimited, 0 sold out")
	f.BoolVar(&o.enabled, "enabled", true, "whether registrations are accepted (--enabled=false closes the line)")
	f.Float64Var(&o.rate, "rate", 0, "admissions per second; 0 admits nobody")
	f.Int64Var(&o.maxActive, "max-active", 0, "most people admitted at once; 0 means no cap")
	f.DurationVar(&o.sessionTTL, "session-ttl", 0, "how long an admission lasts (whole seconds, up to 24h)")
	f.BoolVar(&o.paused, "paused", false, "stop admission, keeping the rate (--paused=false resumes at it)")
	f.StringVar(&o.mode, "mode", "", "queue mode: fifo (the line), passthrough (everyone in at the next tick, still counted), reject (new registrations refused), random (a committed-seed draw over each window) or auto (fifo, invisible while the item has room: the kit sends people straight on)")
	f.StringVar(&o.rejectMsg, "reject-message", "", "what registrations refused in reject mode are told (the page shows it)")
	f.StringVar(&o.tplFile, "template-file", "", `the item's own waiting page: an HTML template with placeholders (docs/waiting-page.md), checked before it is sent ("" returns to the install's page)`)
	f.StringArrayVar(&o.tplLang, "template-lang", nil, `LANG=FILE: the item's own waiting page for readers of one language (en, ko, ja, de, es), checked before it is sent; repeatable; LANG= removes it`)
	f.StringVar(&o.notice, "notice", "", `a message to everyone waiting, shown on every open page within seconds ("" clears it)`)
	f.IntVar(&o.powBits, "pow-difficulty", 0, "proof-of-work a registration must carry, in leading zero bits (0 off; 18 took about 0.2 s in headless Chromium here)")
	f.DurationVar(&o.idle, "idle-timeout", 0, "release a waiting place whose holder neither polls nor holds an event stream for this long (ABANDONED; whole seconds, 0 off)")
	f.StringVar(&o.opensAt, "opens-at", "", "schedule the sale (RFC 3339 time or unix ms; 0: open now): registrations before it are pre-queued and placed by a committed-seed draw at that time (needs the admin API: it makes the commitment)")
	f.DurationVar(&o.drawWindow, "draw-window", 0, "random mode's lottery window (whole seconds; 0: 60s)")
}

// runItemsSet sends the change the flags ask for through the admin API when
// there is an admin token, else to waitroom.items.
func (a *app) runItemsSet(cmd *cobra.Command, args []string, o *setItemOpts, ao *adminOpts, ko *kafkaOpts) error {
	item := args[0]
	if !topics.ValidID(item) {
		return usagef("itemId %q is not %s", item, topics.IDRule)
	}
	c, err := o.patch(cmd)
	if err != nil {
		return err
	}
	if err := checkPatch(&c); err != nil {
		return err
	}
	if ao.token != "" {
		if err := ao.validate(); err != nil {
			return err
		}
		return a.leaf(func(ctx context.Context) error { return a.setItemAdmin(ctx, ao, item, &c) })(cmd, args)
	}
	if err := ko.validate(); err != nil {
		return err
	}
	return a.leaf(func(ctx context.Context) error { return a.setItemKafka(ctx, ko, item, &c) })(cmd, args)
}

// patch is the change the flags given ask for: the fields of the flags not
// given stay nil (unchanged).
func (o *setItemOpts) patch(cmd *cobra.Command) (itempatch.Patch, error) {
	f := cmd.Flags()
	var c itempatch.Patch
	if f.Changed("name") {
		c.Name = &o.name
	}
	if f.Changed("stock") {
		c.Stock = &o.stock
	}
	if f.Changed("enabled") {
		c.Enabled = &o.enabled
	}
	if f.Changed("rate") {
		c.RatePerSecond = &o.rate
	}
	if f.Changed("max-active") {
		c.MaxActive = &o.maxActive
	}
	if f.Changed("session-ttl") {
		if o.sessionTTL%time.Second != 0 {
			return c, usagef("--session-ttl %s: must be whole seconds in 1s..24h", o.sessionTTL)
		}
		c.SessionTTLSeconds = seconds(o.sessionTTL)
	}
	if f.Changed("paused") {
		c.Paused = &o.paused
	}
	if f.Changed("mode") {
		c.Mode = &o.mode
	}
	if f.Changed("reject-message") {
		c.RejectMessage = &o.rejectMsg
	}
	if f.Changed("notice") {
		c.Notice = &o.notice
	}
	if f.Changed("template-file") {
		src, err := readTemplateFile(o.tplFile)
		if err != nil {
			return c, err
		}
		c.Template = &src
	}
	for _, lf := range o.tplLang {
		lang, file, ok := strings.Cut(lf, "=")
		if !ok || lang == "" {
			return c, usagef("--template-lang %q: want LANG=FILE (LANG= removes the page)", lf)
		}
		src, err := readTemplateFile(file)
		if err != nil {
			return c, err
		}
		if c.Templates == nil {
			c.Templates = map[string]string{}
		}
		c.Templates[lang] = src
	}
	if f.Changed("pow-difficulty") {
		c.PowDifficulty = &o.powBits
	}
	return c, o.patchSchedule(cmd, &c)
}

// patchSchedule adds the flags of the item's timing to c: --idle-timeout,
// --opens-at and --draw-window.
func (o *setItemOpts) patchSchedule(cmd *cobra.Command, c *itempatch.Patch) error {
	f := cmd.Flags()
	if f.Changed("idle-timeout") {
		if o.idle%time.Second != 0 || o.idle < 0 {
			return usagef("--idle-timeout %s: must be whole seconds (0 turns it off)", o.idle)
		}
		c.IdleTimeoutSeconds = seconds(o.idle)
	}
	if f.Changed("opens-at") {
		ms, err := parseOpensAt(o.opensAt)
		if err != nil {
			return err
		}
		c.OpensAt = &ms
	}
	if f.Changed("draw-window") {
		if o.drawWindow%time.Second != 0 {
			return usagef("--draw-window %s: must be whole seconds", o.drawWindow)
		}
		c.DrawWindowSeconds = seconds(o.drawWindow)
	}
	return nil
}

// seconds is d in whole seconds, as a patch field.
func seconds(d time.Duration) *int64 {
	s := int64(d / time.Second)
	return &s
}

// readTemplateFile reads --template-file; "" is the install's page.
func readTemplateFile(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", usagef("--template-file: %v", err)
	}
	return string(b), nil
}

// parseOpensAt reads --opens-at: an RFC 3339 time or unix milliseconds.
func parseOpensAt(v string) (int64, error) {
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return 0, usagef("--opens-at %q: want an RFC 3339 time (2026-12-01T10:00:00Z) or unix milliseconds", v)
	}
	return t.UnixMilli(), nil
}

// setItemKafka publishes the changed state of item to waitroom.items as the
// next version.
func (a *app) setItemKafka(ctx context.Context, o *kafkaOpts, item string, c *itempatch.Patch) error {
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
		cur = itempatch.NewItem(item)
	}
	next, perr := c.Apply(cur)
	if perr != nil {
		return usagef("%s %s", flagOf[perr.Field], perr.Problem)
	}
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
func (a *app) setItemAdmin(ctx context.Context, o *adminOpts, item string, c *itempatch.Patch) error {
	cl := newAdminClient(o)
	path := "/items/" + url.PathEscape(item)
	var v itemView
	if !c.State.Empty() {
		if err := cl.do(ctx, http.MethodPost, path, c.State, &v); err != nil {
			return err
		}
	}
	if !c.Policy.Empty() {
		if err := cl.do(ctx, http.MethodPut, path+"/admission", c.Policy, &v); err != nil {
			return err
		}
	}
	s := topics.ItemState{V: topics.Version, ItemID: v.ItemID, Name: v.Name, Stock: v.Stock, Enabled: v.Enabled, Version: v.Version, UpdatedAt: v.UpdatedAt,
		Mode: v.Mode, RejectMessage: v.RejectMessage, Notice: v.Notice, Template: v.Template, Templates: v.Templates,
		OpensAt: v.OpensAt, DrawWindowSeconds: v.DrawWindowSeconds, DrawCommit: v.DrawCommit, DrawRounds: v.DrawRounds,
		Policy: topics.AdmissionPolicy{RatePerSecond: v.Policy.RatePerSecond, MaxActive: v.Policy.MaxActive, SessionTTLSeconds: v.Policy.SessionTTLSeconds, Paused: v.Policy.Paused}}
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
	switch {
	case s.Policy.Paused:
		rate += " (paused)"
	case s.Policy.RatePerSecond == 0:
		rate = "0 (nobody admitted)"
	}
	for _, r := range [][2]string{
		{"item", s.ItemID}, {"version", strconv.FormatInt(s.Version, 10)}, {"name", s.Name}, {"stock", stock},
		{"enabled", strconv.FormatBool(s.Enabled)}, {"mode", s.ModeOf()}, {"rate", rate},
		{"max-active", strconv.FormatInt(s.Policy.MaxActive, 10)},
		{"session-ttl", (time.Duration(s.Policy.SessionTTLSeconds) * time.Second).String()},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	if s.OpensAt > 0 {
		fmt.Fprintf(tw, "opens-at:\t%s\n", time.UnixMilli(s.OpensAt).UTC().Format(time.RFC3339))
	}
	if s.DrawCommit != "" {
		fmt.Fprintf(tw, "draw-commit:\t%s (%d rounds)\n", s.DrawCommit, s.DrawRounds)
	}
	if s.Template != "" {
		fmt.Fprintf(tw, "waiting-page:\tthe item's own template (%d bytes)\n", len(s.Template))
	}
	for _, lang := range slices.Sorted(maps.Keys(s.Templates)) {
		fmt.Fprintf(tw, "waiting-page %s:\tthe item's own template in %s (%d bytes)\n", lang, lang, len(s.Templates[lang]))
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
