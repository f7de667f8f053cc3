package view

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/waitroom/waitroom/topics"
)

// KafkaRecord is the Record of a running stack: the registrations the
// consumer group committed (committed only after their Redis write, so the
// view must hold them) and the admission events on the topic for longer than
// Grace (the scheduler advances the marker right after publishing).
type KafkaRecord struct {
	adm   *kadm.Client
	group string
	grace time.Duration

	mu      sync.Mutex
	samples []sample // admissions end offsets, oldest first
}

type sample struct {
	at   time.Time
	ends map[string]int64
}

// NewKafkaRecord returns the Record of group (the registrations consumer
// group) over adm; grace is how long an admission event may stay unapplied
// (default 2 s).
func NewKafkaRecord(adm *kadm.Client, group string, grace time.Duration) *KafkaRecord {
	if grace <= 0 {
		grace = 2 * time.Second
	}
	return &KafkaRecord{adm: adm, group: group, grace: grace}
}

// Floor implements Record.
func (r *KafkaRecord) Floor(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	offs, err := r.adm.FetchOffsetsForTopics(ctx, r.group, topics.Registrations)
	if err != nil {
		return nil, fmt.Errorf("fetch committed offsets of %s: %w", r.group, err)
	}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At > 0 {
			out[Field(o.Topic, o.Partition)] = o.At
		}
	})
	// The last stable offset: an open transaction's events (a leader
	// publishing right now, or a dead one's until it times out) are not
	// on the record yet; the scheduler advances the marker past a
	// committed transaction's marker (promote.committedPast).
	ends, err := r.adm.ListCommittedOffsets(ctx, topics.Admissions)
	if err != nil {
		return nil, fmt.Errorf("list last stable offsets of %s: %w", topics.Admissions, err)
	}
	now := time.Now()
	s := sample{at: now, ends: map[string]int64{}}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			s.ends[Field(o.Topic, o.Partition)] = o.Offset
		}
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
	// Keep the newest sample older than grace and everything after it.
	var old map[string]int64
	i := 0
	for i < len(r.samples) && now.Sub(r.samples[i].at) >= r.grace {
		old = r.samples[i].ends
		i++
	}
	if i > 1 {
		r.samples = r.samples[i-1:]
	}
	for k, v := range old {
		out[k] = v
	}
	return out, nil
}

// Forget drops what was sampled: a rebuild just read the topics.
func (r *KafkaRecord) Forget() {
	r.mu.Lock()
	r.samples = nil
	r.mu.Unlock()
}
