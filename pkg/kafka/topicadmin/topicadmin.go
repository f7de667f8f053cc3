// Package topicadmin applies the topics' contract (topics.Specs) to a
// cluster with kadm: Check reports how each topic differs, Ensure creates
// what is missing and sets configs back. The contract itself stays free of
// Kafka clients.
package topicadmin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/waitroom/waitroom/topics"
)

// Status of one topic after Check or Ensure.
type Status struct {
	Topic    string
	State    string   // "ok", "created", "updated", "missing" or "mismatch"
	Problems []string // what differs from the spec, for missing and mismatch
}

// Check compares the cluster with the specs and changes nothing.
func Check(ctx context.Context, adm *kadm.Client, specs []topics.Spec) ([]Status, error) {
	return reconcile(ctx, adm, specs, false, -1)
}

// Ensure creates missing topics and sets configs that differ. A partition count
// that differs is reported, never changed: adding partitions would move items
// to other partitions and break their order.
func Ensure(ctx context.Context, adm *kadm.Client, specs []topics.Spec, replicationFactor int16) ([]Status, error) {
	return reconcile(ctx, adm, specs, true, replicationFactor)
}

// Healthy reports whether every status is ok, created or updated.
func Healthy(st []Status) bool {
	for _, s := range st {
		if s.State == "missing" || s.State == "mismatch" {
			return false
		}
	}
	return true
}

func reconcile(ctx context.Context, adm *kadm.Client, specs []topics.Spec, fix bool, rf int16) ([]Status, error) {
	out, existing, err := reconcileTopics(ctx, adm, specs, fix, rf)
	if err != nil {
		return nil, err
	}
	if len(existing) == 0 {
		return out, nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, existing...)
	if err != nil {
		return nil, fmt.Errorf("describe topic configs: %w", err)
	}
	for i := range out {
		if !slices.Contains(existing, out[i].Topic) {
			continue
		}
		rc, err := rcs.On(out[i].Topic, nil)
		if err != nil {
			return nil, fmt.Errorf("configs of %s: %w", out[i].Topic, err)
		}
		want := specs[slices.IndexFunc(specs, func(s topics.Spec) bool { return s.Name == out[i].Topic })].Configs
		if err := reconcileConfigs(ctx, adm, &out[i], rc, want, fix); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// reconcileTopics checks that each topic of specs exists (creating it when
// fix) with its partitions; existing are the ones that were already there.
func reconcileTopics(ctx context.Context, adm *kadm.Client, specs []topics.Spec, fix bool, rf int16) (out []Status, existing []string, err error) {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	// A direct metadata request: kadm otherwise answers from the client's
	// cache, which can still say "missing" for a topic created a moment ago.
	details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), names...)
	if err != nil {
		return nil, nil, fmt.Errorf("list topics: %w", err)
	}
	out = make([]Status, 0, len(specs))
	for _, s := range specs {
		d, ok := details[s.Name]
		if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			if !fix {
				out = append(out, Status{Topic: s.Name, State: "missing", Problems: []string{"topic does not exist"}})
				continue
			}
			resp, err := adm.CreateTopic(ctx, s.Partitions, rf, ptrConfigs(s.Configs), s.Name)
			if err == nil {
				err = resp.Err
			}
			if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
				return nil, nil, fmt.Errorf("create topic %s: %w", s.Name, err)
			}
			out = append(out, Status{Topic: s.Name, State: "created"})
			continue
		}
		if d.Err != nil {
			return nil, nil, fmt.Errorf("describe topic %s: %w", s.Name, d.Err)
		}
		st := Status{Topic: s.Name, State: "ok"}
		if n := int32(len(d.Partitions)); n != s.Partitions {
			st.State = "mismatch"
			st.Problems = append(st.Problems, fmt.Sprintf("has %d partitions, contract says %d (not changed: it would reorder items)", n, s.Partitions))
		}
		out = append(out, st)
		existing = append(existing, s.Name)
	}
	return out, existing, nil
}

// reconcileConfigs compares the topic's configs rc with want: a difference
// is a mismatch in st, or, when fix, is altered (st then says updated).
func reconcileConfigs(ctx context.Context, adm *kadm.Client, st *Status, rc kadm.ResourceConfig, want map[string]string, fix bool) error {
	var alter []kadm.AlterConfig
	for k, v := range want {
		got := ""
		for _, c := range rc.Configs {
			if c.Key == k {
				got = c.MaybeValue()
			}
		}
		if got == v {
			continue
		}
		if !fix {
			st.State = "mismatch"
			st.Problems = append(st.Problems, fmt.Sprintf("%s is %q, contract says %q", k, got, v))
			continue
		}
		val := v
		alter = append(alter, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: &val})
	}
	if len(alter) == 0 {
		return nil
	}
	resps, err := adm.AlterTopicConfigs(ctx, alter, st.Topic)
	if err == nil {
		_, err = resps.On(st.Topic, nil)
	}
	if err != nil {
		return fmt.Errorf("alter configs of %s: %w", st.Topic, err)
	}
	if st.State == "ok" {
		st.State = "updated"
	}
	return nil
}

func ptrConfigs(m map[string]string) map[string]*string {
	out := make(map[string]*string, len(m))
	for k, v := range m {
		out[k] = &v
	}
	return out
}
