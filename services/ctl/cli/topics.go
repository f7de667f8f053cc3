package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"github.com/waitroom/waitroom/pkg/kafka/topicadmin"
	"github.com/waitroom/waitroom/pkg/redisview/retention"
	"github.com/waitroom/waitroom/topics"
)

// ErrUnhealthy is returned when the topics do not match the contract.
var ErrUnhealthy = errors.New("topics do not match the contract")

// kafkaOpts are the flags of every command that talks to Kafka.
type kafkaOpts struct {
	brokers []string
	timeout time.Duration
}

func (a *app) kafkaFlags(cmd *cobra.Command, o *kafkaOpts) {
	pf := cmd.PersistentFlags()
	pf.StringSliceVar(&o.brokers, "brokers", a.env.Kafka.Brokers, "Kafka seed brokers, comma separated (env WR_KAFKA_BROKERS)")
	pf.DurationVar(&o.timeout, "timeout", 30*time.Second, "give up when Kafka has not answered within this time")
}

func (o *kafkaOpts) validate() error {
	if len(o.brokers) == 0 {
		return usagef("--brokers: at least one broker is needed")
	}
	for _, b := range o.brokers {
		if strings.TrimSpace(b) == "" {
			return usagef("--brokers: empty broker address in %q", strings.Join(o.brokers, ","))
		}
	}
	if o.timeout <= 0 {
		return usagef("--timeout %s: must be positive", o.timeout)
	}
	return nil
}

// base returns the options every Kafka client of the command starts from:
// the flags' brokers with the environment's security settings. It asks Kafka
// once whether it accepts them, so a wrong credential is one clear line.
func (a *app) base(ctx context.Context, o *kafkaOpts) ([]kgo.Opt, error) {
	k := a.env.Kafka
	k.Brokers = o.brokers
	opts, err := kclient.Opts(ctx, k, k.ClientID, a.log)
	if err != nil {
		return nil, usageError{err}
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	if err := kclient.Check(ctx, cl, k); err != nil {
		return nil, err
	}
	return opts, nil
}

type topicsOpts struct {
	kafkaOpts
	partitions  int32
	replication int16
	redisAddr   string // topics check: compare retention with the lines in this Redis
}

func (o *topicsOpts) validate() error {
	if err := o.kafkaOpts.validate(); err != nil {
		return err
	}
	if o.partitions <= 0 {
		return usagef("--partitions %d: must be positive", o.partitions)
	}
	if o.replication == 0 || o.replication < -1 {
		return usagef("--replication-factor %d: must be positive, or -1 for the broker default", o.replication)
	}
	return nil
}

func (a *app) topicsCmd() *cobra.Command {
	o := topicsOpts{replication: -1}
	ensure := &cobra.Command{
		Use:   "ensure",
		Short: "Create missing topics and fix their configs (partition counts are reported, never changed)",
		Args:  cobra.NoArgs,
		RunE:  a.leaf(func(ctx context.Context) error { return a.runTopics(ctx, &o, true) }),
	}
	ensure.Flags().Int16Var(&o.replication, "replication-factor", -1, "replication factor of created topics; -1 takes the broker default")
	check := &cobra.Command{
		Use:   "check",
		Short: "Compare the topics with the contract and change nothing; exit 1 when they differ",
		Args:  cobra.NoArgs,
		Long: `Compare the topics with the contract and change nothing; exit 1 when they differ.

With Redis (--redis, or WR_REDIS_ADDR set in the environment) it also checks
that Kafka still holds what a rebuild of the view needs: the register record of
every live entry (waiting or admitted) on waitroom.registrations and the
admission event of every live admission on waitroom.admissions. It warns when a
topic's retention is shorter than the age of the oldest such record (Kafka may
delete it with its segment at any time) and fails (exit 1) when some are gone
already: a rebuild now would be incomplete. It reads both topics from their
start, as a rebuild would.`,
		RunE: a.leaf(func(ctx context.Context) error { return a.runTopics(ctx, &o, false) }),
	}
	redisDefault := ""
	_, addr := os.LookupEnv("WR_REDIS_ADDR")
	if _, addrs := os.LookupEnv("WR_REDIS_ADDRS"); addr || addrs {
		redisDefault = a.redisDefault()
	}
	check.Flags().StringVar(&o.redisAddr, "redis", redisDefault, "Redis of the lines: check retention against them (env WR_REDIS_ADDR or WR_REDIS_ADDRS; the other WR_REDIS_* apply)")
	g := group("topics", "Create or check the Kafka topics of the contract", ensure, check)
	a.kafkaFlags(g, &o.kafkaOpts)
	g.PersistentFlags().Int32Var(&o.partitions, "partitions", a.env.Partitions, "partitions of waitroom.registrations and waitroom.admissions (env WR_REGISTRATION_PARTITIONS)")
	return g
}

func (a *app) runTopics(ctx context.Context, o *topicsOpts, fix bool) error {
	if err := o.validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	base, err := a.base(ctx, &o.kafkaOpts)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(base...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	opts := topics.DefaultOptions()
	opts.RegistrationPartitions = o.partitions
	specs := topics.Specs(opts)
	var st []topicadmin.Status
	verb := "check"
	if fix {
		verb = "ensure"
		st, err = topicadmin.Ensure(ctx, adm, specs, o.replication)
	} else {
		st, err = topicadmin.Check(ctx, adm, specs)
	}
	if err != nil {
		return fmt.Errorf("%s topics on %s: %w", verb, strings.Join(o.brokers, ","), err)
	}
	healthy := topicadmin.Healthy(st)
	var rep *retention.Report
	if !fix && o.redisAddr != "" {
		rdb, err := a.redisAt(o.redisAddr, 2)
		if err != nil {
			return err
		}
		defer rdb.Close()
		got, err := retention.New(base, rdb).Check(ctx, time.Now())
		if err != nil {
			return fmt.Errorf("check retention against the lines in Redis %s: %w", o.redisAddr, err)
		}
		rep = &got
	}
	if err := a.printTopics(st, healthy, rep); err != nil {
		return err
	}
	if !healthy {
		return ErrUnhealthy
	}
	if rep != nil && !rep.Complete() {
		return ErrIncomplete
	}
	return nil
}

// ErrIncomplete is returned when Kafka no longer holds every record a rebuild
// of the view needs.
var ErrIncomplete = errors.New("a rebuild of the view now would be incomplete: records it needs were deleted by retention")

// topicRow is one topic in -o json.
type topicRow struct {
	Topic    string   `json:"topic"`
	State    string   `json:"state"`
	Problems []string `json:"problems"`
}

// retentionRow is one topic's retention against the lines in -o json.
type retentionRow struct {
	Topic          string  `json:"topic"`
	RetentionMs    int64   `json:"retentionMs"` // 0: unlimited
	Needed         int     `json:"needed"`
	OldestItem     string  `json:"oldestItem,omitempty"`
	OldestToken    string  `json:"oldestToken,omitempty"`
	OldestAgeSec   float64 `json:"oldestAgeSeconds"`
	Missing        int     `json:"missing"`
	MissingExample string  `json:"missingExample,omitempty"`
}

func retentionRows(r *retention.Report) []retentionRow {
	var rows []retentionRow
	for _, t := range []retention.Topic{r.Registrations, r.Admissions} {
		row := retentionRow{Topic: t.Topic, RetentionMs: t.Retention.Milliseconds(), Needed: t.Needed,
			OldestAgeSec: t.Age(r.At).Seconds(), Missing: t.Missing, MissingExample: t.MissingExample}
		if t.Oldest != nil {
			row.OldestItem, row.OldestToken = t.Oldest.Item, t.Oldest.Token
		}
		rows = append(rows, row)
	}
	return rows
}

func (a *app) printRetention(r *retention.Report) error {
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nRETENTION\tKEEPS\tLIVE ENTRIES\tOLDEST NEEDED\tAGE\tMISSING")
	for _, t := range []retention.Topic{r.Registrations, r.Admissions} {
		keeps, oldest, age := "forever", "-", "-"
		if t.Retention > 0 {
			keeps = retention.Human(t.Retention)
		}
		if t.Oldest != nil {
			oldest, age = t.Oldest.Item+"/"+t.Oldest.Token, retention.Human(t.Age(r.At))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\n", t.Topic, keeps, t.Needed, oldest, age, t.Missing)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, w := range r.Warnings {
		fmt.Fprintln(a.out, "warning:", w)
	}
	for _, f := range r.Failures {
		fmt.Fprintln(a.out, "FAIL:", f)
	}
	if r.Complete() {
		_, err := fmt.Fprintf(a.out, "rebuild complete: Kafka holds every record the %d live lines need\n", r.Items)
		return err
	}
	return nil
}

func (a *app) printTopics(st []topicadmin.Status, healthy bool, rep *retention.Report) error {
	if a.wantJSON() {
		rows := make([]topicRow, len(st))
		for i, s := range st {
			rows[i] = topicRow{Topic: s.Topic, State: s.State, Problems: s.Problems}
			if rows[i].Problems == nil {
				rows[i].Problems = []string{}
			}
		}
		out := struct {
			Healthy   bool           `json:"healthy"`
			Topics    []topicRow     `json:"topics"`
			Retention []retentionRow `json:"retention,omitempty"`
			Complete  *bool          `json:"rebuildComplete,omitempty"`
			Warnings  []string       `json:"warnings,omitempty"`
			Failures  []string       `json:"failures,omitempty"`
		}{Healthy: healthy, Topics: rows}
		if rep != nil {
			c := rep.Complete()
			out.Retention, out.Complete, out.Warnings, out.Failures = retentionRows(rep), &c, rep.Warnings, rep.Failures
		}
		return a.printJSON(out)
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tSTATE\tPROBLEMS")
	bad := 0
	for _, s := range st {
		problems := "-"
		if len(s.Problems) > 0 {
			problems = strings.Join(s.Problems, "; ")
		}
		if s.State == "missing" || s.State == "mismatch" {
			bad++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Topic, s.State, problems)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if healthy {
		if _, err := fmt.Fprintf(a.out, "healthy: %d topics match the contract\n", len(st)); err != nil {
			return err
		}
	} else if _, err := fmt.Fprintf(a.out, "NOT healthy: %d of %d topics differ from the contract\n", bad, len(st)); err != nil {
		return err
	}
	if rep != nil {
		return a.printRetention(rep)
	}
	return nil
}
