package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/topics"
)

// dlqOpts are the flags of the dlq commands.
type dlqOpts struct {
	kafkaOpts
	topic       string // as given: registrations, items, admissions or a full name
	errorType   string
	sourceTopic string
	since       string
	limit       int
	dryRun      bool
	rate        float64
	force       bool
	reset       bool
}

// resolve checks the flags and returns the DLQ topic and the filter.
func (o *dlqOpts) resolve() (string, dlq.Filter, error) {
	if err := o.kafkaOpts.validate(); err != nil {
		return "", dlq.Filter{}, err
	}
	topic, err := dlq.Topic(o.topic)
	if err != nil {
		return "", dlq.Filter{}, usagef("--topic: %v", err)
	}
	since, err := dlq.ParseSince(o.since, time.Now())
	if err != nil {
		return "", dlq.Filter{}, usagef("--since %q: want an RFC 3339 time (2026-05-01T10:00:00Z) or a duration back from now (90m, 2h)", o.since)
	}
	f := dlq.Filter{SourceTopic: o.sourceTopic, ErrorType: strings.ToUpper(o.errorType), Since: since, Limit: o.limit}
	if t, err := dlq.Topic(o.sourceTopic); err == nil && !strings.HasSuffix(o.sourceTopic, ".dlq") {
		f.SourceTopic = dlq.SourceOf(t) // a short name: registrations -> waitroom.registrations
	}
	if f.ErrorType != "" && !strings.HasSuffix(f.ErrorType, "_ERROR") {
		f.ErrorType += "_ERROR" // --error-type parsing
	}
	if err := f.Validate(); err != nil {
		switch {
		case o.limit < 0:
			return "", f, usagef("--limit %d: must be 0 (no limit) or more", o.limit)
		default:
			return "", f, usagef("--error-type %q: want PARSING_ERROR, VALIDATION_ERROR or PROCESSING_ERROR", o.errorType)
		}
	}
	if o.rate < 0 {
		return "", f, usagef("--rate %v: must be 0 (no limit) or more", o.rate)
	}
	return topic, f, nil
}

func (a *app) dlqCmd() *cobra.Command {
	o := dlqOpts{}
	filters := func(cmd *cobra.Command, limit int, limitHelp string) {
		f := cmd.Flags()
		f.StringVar(&o.errorType, "error-type", "", "only this error type: PARSING_ERROR, VALIDATION_ERROR or PROCESSING_ERROR (or parsing, validation, processing)")
		f.StringVar(&o.sourceTopic, "source-topic", "", "only letters whose source-topic header is this topic (registrations, items, admissions or a full name)")
		f.StringVar(&o.since, "since", "", "only letters written since this RFC 3339 time or this long ago (90m, 2h)")
		f.IntVar(&o.limit, "limit", limit, limitHelp)
	}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List dead letters, oldest first, with the reason and the source record's position",
		Example: `  waitroomctl dlq ls
  waitroomctl dlq ls --topic items --error-type VALIDATION_ERROR --since 2h
  waitroomctl dlq ls --limit 0 -o json   # every letter, as JSON`,
		Args: cobra.NoArgs,
		RunE: a.leaf(func(ctx context.Context) error { return a.runDLQList(ctx, &o) }),
	}
	filters(ls, 100, "list at most this many; 0 lists all")
	show := &cobra.Command{
		Use:   "show <partition>/<offset>",
		Short: "Show one dead letter: every header and the payload",
		Long: `Show one dead letter: every header and the payload.
<partition>/<offset> is its position in the DLQ topic, the ENTRY column of 'dlq ls'.`,
		Example: "  waitroomctl dlq show 2/41\n  waitroomctl dlq show 0/7 --topic items -o json",
		Args:    exactArgs(1, "one <partition>/<offset>, as in the ENTRY column of 'dlq ls'"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, off, err := dlq.ParseID(args[0])
			if err != nil {
				return usageError{err}
			}
			return a.leaf(func(ctx context.Context) error { return a.runDLQShow(ctx, &o, p, off) })(cmd, args)
		},
	}
	replay := &cobra.Command{
		Use:   "replay",
		Short: "Republish dead letters to their source topic (once: the position is remembered)",
		Long: `Republish dead letters to their source topic, oldest first, with their original key,
value and headers plus a replayed-from header naming the letter. Fix the cause first
(publish the missing item, repair the key in Redis): a record that fails again comes
back to the DLQ with its replayed-from header, and replays pass such a copy over
(failed-again), so running replay again sends nothing twice; once the cause is fixed,
--reset sends the original letters again.

Letters that still fail the contract's decoder (malformed bytes, invalid fields) are kept
back and reported, since they would come straight back; --force republishes them anyway.

How far replays got is remembered in the consumer group waitroom-dlq-replay-<dlq topic>
(shared with the admin API): a second run replays nothing already dealt with. Letters
the filters leave out are passed over and remembered too; --reset considers every letter
again (replaying a registration already in the line changes nothing). Run one replay
of a topic at a time.`,
		Example: `  waitroomctl dlq replay --dry-run
  waitroomctl dlq replay --error-type VALIDATION_ERROR --rate 200
  waitroomctl dlq replay --topic items`,
		Args: cobra.NoArgs,
		RunE: a.leaf(func(ctx context.Context) error { return a.runDLQReplay(ctx, &o) }),
	}
	filters(replay, 0, "replay (or keep back) at most this many, oldest first; 0: all")
	rf := replay.Flags()
	rf.BoolVar(&o.dryRun, "dry-run", false, "only report what would be replayed; publish and remember nothing")
	rf.Float64Var(&o.rate, "rate", 0, "republish at most this many records per second; 0: as fast as Kafka acks (--timeout bounds the whole replay: raise it for long ones)")
	rf.BoolVar(&o.force, "force", false, "also republish letters that still fail the contract's decoder")
	rf.BoolVar(&o.reset, "reset", false, "ignore the remembered position: consider every letter again")

	g := group("dlq", "List, inspect and replay dead letters (the .dlq topics)", ls, show, replay)
	a.kafkaFlags(g, &o.kafkaOpts)
	g.PersistentFlags().StringVar(&o.topic, "topic", "registrations", "the DLQ: registrations, items, admissions, or a full topic name ending in .dlq")
	return g
}

// exactArgs is cobra.ExactArgs with an error that says what to give.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s wants %s, got %d arguments", cmd.CommandPath(), what, len(args))
		}
		return nil
	}
}

func (a *app) runDLQList(ctx context.Context, o *dlqOpts) error {
	topic, f, err := o.resolve()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	base, err := a.base(ctx, &o.kafkaOpts)
	if err != nil {
		return err
	}
	l, err := dlq.NewInspector(base).List(ctx, topic, f)
	if err != nil {
		return dlqFailure("list", topic, o, err)
	}
	if a.wantJSON() {
		return a.printJSON(l)
	}
	if len(l.Entries) == 0 {
		_, err := fmt.Fprintf(a.out, "no dead letters in %s%s\n", topic, filtered(f))
		return err
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENTRY\tFAILED-AT\tERROR-TYPE\tSOURCE\tKEY\tATTEMPTS\tERROR")
	for _, e := range l.Entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", e.ID(), stamp(e.Verdict.FailedAt), orDash(e.Verdict.ErrorType),
			e.Verdict.Source(), clip(printable(e.Key), 24), e.Verdict.Attempts, clip(e.Verdict.Error, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l.Truncated {
		_, err = fmt.Fprintf(a.out, "%d dead letters shown, more follow (--limit %d reached; --limit 0 lists all)\n", len(l.Entries), f.Limit)
		return err
	}
	_, err = fmt.Fprintf(a.out, "%d dead letters in %s%s\n", len(l.Entries), topic, filtered(f))
	return err
}

func (a *app) runDLQShow(ctx context.Context, o *dlqOpts, partition int32, offset int64) error {
	topic, _, err := o.resolve()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	base, err := a.base(ctx, &o.kafkaOpts)
	if err != nil {
		return err
	}
	e, err := dlq.NewInspector(base).Show(ctx, topic, partition, offset)
	if err != nil {
		return dlqFailure("show", topic, o, err)
	}
	if a.wantJSON() {
		return a.printJSON(e)
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	v := e.Verdict
	rows := [][2]string{
		{"entry", e.Topic + " " + e.ID()},
		{"written-at", stamp(e.WrittenAt)},
		{"key", printable(e.Key)},
		{topics.HeaderErrorType, orDash(v.ErrorType)},
		{topics.HeaderError, orDash(v.Error)},
		{topics.HeaderSourceTopic, orDash(v.SourceTopic)},
		{topics.HeaderSourcePartition, strconv.Itoa(int(v.SourcePartition))},
		{topics.HeaderSourceOffset, strconv.FormatInt(v.SourceOffset, 10)},
		{topics.HeaderFailedAt, stamp(v.FailedAt)},
		{topics.HeaderAttempts, strconv.Itoa(v.Attempts)},
		{topics.HeaderReplayedFrom, orDash(v.ReplayedFrom)},
	}
	for _, h := range e.Extra {
		rows = append(rows, [2]string{"header " + h.Key, h.Value})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.out, "payload (%d bytes):\n%s\n", len(e.Value), payload(e.Value))
	return err
}

func (a *app) runDLQReplay(ctx context.Context, o *dlqOpts) error {
	topic, f, err := o.resolve()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	base, err := a.base(ctx, &o.kafkaOpts)
	if err != nil {
		return err
	}
	rep, err := dlq.NewReplayer(base).Replay(ctx, topic, dlq.ReplayOptions{
		Filter: f, DryRun: o.dryRun, Rate: o.rate, Force: o.force, Reset: o.reset,
	})
	if err != nil {
		if rep.Replayed > 0 && !o.dryRun {
			err = fmt.Errorf("%w (%d records were republished before it)", err, rep.Replayed)
		}
		return dlqFailure("replay", topic, o, err)
	}
	if a.wantJSON() {
		return a.printJSON(rep)
	}
	if len(rep.Outcomes) > 0 {
		tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ENTRY\tACTION\tERROR-TYPE\tSOURCE\tKEY\tTO / REASON")
		for _, r := range rep.Outcomes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Entry, r.Action, orDash(r.ErrorType), r.Source, clip(r.Key, 24), clip(orDash(r.To+r.Reason), 80))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintln(a.out, summary(rep, dlq.SourceOf(topic)))
	return err
}

// summary is the last line of a replay.
func summary(r dlq.Report, source string) string {
	if r.Examined == 0 {
		return fmt.Sprintf("nothing to replay: no letters in %s after the remembered position (group %s; --reset considers every letter again)", r.Topic, r.Group)
	}
	var b strings.Builder
	if r.DryRun {
		fmt.Fprintf(&b, "dry run: would replay %d of %d letters examined to %s", r.Replayed, r.Examined, source)
	} else {
		fmt.Fprintf(&b, "replayed %d of %d letters examined to %s", r.Replayed, r.Examined, source)
	}
	if r.StillInvalid > 0 {
		fmt.Fprintf(&b, "; %d kept back: they still fail the contract (see REASON; --force republishes them)", r.StillInvalid)
	}
	if r.NotMatched > 0 {
		fmt.Fprintf(&b, "; %d passed over by the filters", r.NotMatched)
	}
	if r.FailedAgain > 0 {
		fmt.Fprintf(&b, "; %d passed over: replays that failed again (their letters are sent again with --reset once the cause is fixed)", r.FailedAgain)
	}
	if r.LimitReached {
		b.WriteString("; the limit stopped it: run again for the rest")
	}
	if r.DryRun {
		b.WriteString(". Nothing was published or remembered.")
	} else {
		fmt.Fprintf(&b, ". Remembered in group %s: a next run starts after these.", r.Group)
	}
	return b.String()
}

// dlqFailure turns a pkg/kafka/dlq error into one that says what to do.
func dlqFailure(verb, topic string, o *dlqOpts, err error) error {
	switch {
	case errors.Is(err, dlq.ErrBadOptions):
		return usageError{err}
	case errors.Is(err, dlq.ErrNoTopic):
		return fmt.Errorf("%s %s: %w", verb, topic, err)
	case errors.Is(err, dlq.ErrNotFound):
		return fmt.Errorf("%s: %w ('waitroomctl dlq ls --topic %s' lists what is there)", verb, err, o.topic)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s %s on %s: Kafka did not answer within --timeout %s: %w", verb, topic, strings.Join(o.brokers, ","), o.timeout, err)
	}
	return fmt.Errorf("%s %s on %s: %w", verb, topic, strings.Join(o.brokers, ","), err)
}

func filtered(f dlq.Filter) string {
	var parts []string
	if f.ErrorType != "" {
		parts = append(parts, "error-type "+f.ErrorType)
	}
	if f.SourceTopic != "" {
		parts = append(parts, "source-topic "+f.SourceTopic)
	}
	if !f.Since.IsZero() {
		parts = append(parts, "since "+stamp(f.Since))
	}
	if len(parts) == 0 {
		return ""
	}
	return " matching " + strings.Join(parts, ", ")
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clip shortens s to n runes on one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// printable shows bytes as text when they are, and quoted otherwise.
func printable(b []byte) string {
	if utf8.Valid(b) && !bytes.ContainsFunc(b, func(r rune) bool { return r < ' ' }) {
		return string(b)
	}
	return strconv.Quote(string(b))
}

// payload renders a value: indented when it is JSON, quoted when it is not text.
func payload(v []byte) string {
	if v == nil {
		return "(none: a tombstone)"
	}
	var out bytes.Buffer
	if json.Valid(v) && json.Indent(&out, v, "", "  ") == nil {
		return out.String()
	}
	return printable(v)
}
