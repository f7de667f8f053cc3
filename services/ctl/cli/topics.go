package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kclient"
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
		RunE:  a.leaf(func(ctx context.Context) error { return a.runTopics(ctx, &o, false) }),
	}
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
	var st []topics.Status
	verb := "check"
	if fix {
		verb = "ensure"
		st, err = topics.Ensure(ctx, adm, specs, o.replication)
	} else {
		st, err = topics.Check(ctx, adm, specs)
	}
	if err != nil {
		return fmt.Errorf("%s topics on %s: %w", verb, strings.Join(o.brokers, ","), err)
	}
	healthy := topics.Healthy(st)
	if err := a.printTopics(st, healthy); err != nil {
		return err
	}
	if !healthy {
		return ErrUnhealthy
	}
	return nil
}

// topicRow is one topic in -o json.
type topicRow struct {
	Topic    string   `json:"topic"`
	State    string   `json:"state"`
	Problems []string `json:"problems"`
}

func (a *app) printTopics(st []topics.Status, healthy bool) error {
	if a.wantJSON() {
		rows := make([]topicRow, len(st))
		for i, s := range st {
			rows[i] = topicRow{Topic: s.Topic, State: s.State, Problems: s.Problems}
			if rows[i].Problems == nil {
				rows[i].Problems = []string{}
			}
		}
		return a.printJSON(struct {
			Healthy bool       `json:"healthy"`
			Topics  []topicRow `json:"topics"`
		}{healthy, rows})
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
		_, err := fmt.Fprintf(a.out, "healthy: %d topics match the contract\n", len(st))
		return err
	}
	_, err := fmt.Fprintf(a.out, "NOT healthy: %d of %d topics differ from the contract\n", bad, len(st))
	return err
}
