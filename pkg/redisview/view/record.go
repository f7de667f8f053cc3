package view

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
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

	base      []kgo.Opt // ReadGaps's: nil, Settle looks at nothing
	reflected Reflected // Reflects's: nil, every committed event in a gap is missed

	mu      sync.Mutex
	samples []sample                // admissions end offsets, oldest first
	empty   map[string]kclient.Span // per admissions partition, offsets read holding no event
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

// ReadGaps makes r a Settler (Settle): it reads the admissions the view has
// not applied through clients built from base. It returns r.
func (r *KafkaRecord) ReadGaps(base []kgo.Opt) *KafkaRecord {
	r.base = base
	return r
}

// Reflected says whether the view already holds what a committed admission
// event rec records (false when it cannot tell): a leader whose link to
// Redis failed after its commit, before it advanced the marker past it,
// leaves such an event in a gap although its admissions are in the view.
type Reflected func(ctx context.Context, rec *kgo.Record) (bool, error)

// Reflects makes Settle pass over the committed events of a gap that fn
// says the view already holds, instead of judging the view behind (and
// rebuilding it whole) for an advance that did not happen. It returns r.
func (r *KafkaRecord) Reflects(fn Reflected) *KafkaRecord {
	r.reflected = fn
	return r
}

// gapRead bounds one Settle's read of Kafka.
const gapRead = 5 * time.Second

// Settle implements Settler for the admissions partitions: a partition whose
// offsets from applied to floor hold no committed event (only the markers of
// transactions, the events of aborted ones: a leader that died or was fenced
// mid-transaction, or one that died between its commit and the advance of
// the marker), or only committed events the view holds already (Reflects),
// is not behind. Those offsets are read read_committed once (one
// client for every such partition); what was found empty is remembered, so
// a partition left idle costs no read at the next checks. A committed event
// in them keeps the floor: the view missed it.
func (r *KafkaRecord) Settle(ctx context.Context, applied, floor map[string]int64) (map[string]int64, error) {
	out := make(map[string]int64, len(floor))
	spans := map[int32]kclient.Span{}
	r.mu.Lock()
	for k, f := range floor {
		out[k] = f
		topic, p, ok := ParseField(k)
		a := applied[k]
		if !ok || topic != topics.Admissions || a >= f || r.base == nil {
			continue
		}
		if e, ok := r.empty[k]; ok && e.From <= a && f <= e.To {
			out[k] = a
			continue
		}
		spans[p] = kclient.Span{From: a, To: f}
	}
	r.mu.Unlock()
	if len(spans) == 0 {
		return out, nil
	}
	held := map[int32]bool{}
	rctx, cancel := context.WithTimeout(ctx, gapRead)
	defer cancel()
	// No reset: offsets no longer held are an error, not a skip past them.
	err := kclient.ReadSpans(rctx, r.base, topics.Admissions, spans, kclient.ReadOptions{
		Client: []kgo.Opt{kgo.ConsumeResetOffset(kgo.NoResetOffset())},
	}, func(rec *kgo.Record) error {
		if r.reflected != nil {
			if ok, err := r.reflected(rctx, rec); err == nil && ok {
				return nil // in the view already: read on
			}
		}
		held[rec.Partition] = true
		return kclient.SkipPartition
	})
	if err != nil {
		return out, fmt.Errorf("read the admissions the view has not applied: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.empty == nil {
		r.empty = map[string]kclient.Span{}
	}
	for p, sp := range spans {
		if !held[p] {
			k := Field(topics.Admissions, p)
			out[k] = sp.From
			r.empty[k] = sp
		}
	}
	return out, nil
}

// Forget drops what was sampled (a rebuild just read the topics) and what
// was found empty.
func (r *KafkaRecord) Forget() {
	r.mu.Lock()
	r.samples, r.empty = nil, nil
	r.mu.Unlock()
}

var _ Settler = (*KafkaRecord)(nil)
