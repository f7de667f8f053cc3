package dlq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
)

// Errors Inspector and Replayer return; callers branch on them with errors.Is.
var (
	// ErrNoTopic: the DLQ topic does not exist (`waitroomctl topics ensure` creates it).
	ErrNoTopic = errors.New("topic does not exist")
	// ErrNotFound: no dead letter at that partition and offset.
	ErrNotFound = errors.New("no such dead letter")
	// ErrBadOptions: a filter or replay option that cannot be right (the caller's mistake).
	ErrBadOptions = errors.New("bad options")
)

// Filter selects dead letters; the zero Filter selects every one.
type Filter struct {
	// SourceTopic keeps letters whose source-topic header is this topic.
	SourceTopic string
	// ErrorType keeps letters of this error-type (PARSING_ERROR, VALIDATION_ERROR, PROCESSING_ERROR).
	ErrorType string
	// Since keeps letters written to the DLQ at or after this time.
	Since time.Time
	// Limit keeps at most this many, oldest first; 0 keeps all.
	Limit int
}

// Validate reports a filter that can match nothing by mistake.
func (f Filter) Validate() error {
	if f.ErrorType != "" && !slices.Contains(ErrorTypes, f.ErrorType) {
		return fmt.Errorf("%w: error type %q: want one of %v", ErrBadOptions, f.ErrorType, ErrorTypes)
	}
	if f.Limit < 0 {
		return fmt.Errorf("%w: limit %d: must be 0 (no limit) or more", ErrBadOptions, f.Limit)
	}
	return nil
}

// Match reports whether e passes the filter (Limit aside).
func (f Filter) Match(e Entry) bool {
	return (f.SourceTopic == "" || e.Verdict.SourceTopic == f.SourceTopic) &&
		(f.ErrorType == "" || e.Verdict.ErrorType == f.ErrorType) &&
		(f.Since.IsZero() || !e.WrittenAt.Before(f.Since))
}

// Inspector lists and shows dead letters. Every call reads the DLQ topic
// afresh with a client of its own (no consumer group, nothing committed), so
// it costs one metadata round trip plus a read of what it covers.
type Inspector struct {
	base []kgo.Opt
}

// NewInspector returns an Inspector whose clients start from base (seed
// brokers, client id, logger, security: kclient.Opts).
func NewInspector(base []kgo.Opt) *Inspector { return &Inspector{base: base} }

// List is the answer of Inspector.List.
type List struct {
	Topic   string  `json:"topic"`
	Entries []Entry `json:"entries"`
	// Truncated: the limit stopped the listing; more matching letters follow.
	Truncated bool `json:"truncated"`
}

// List reads topic from the start (or from f.Since) to its current end and
// returns the letters f selects, oldest first.
func (in *Inspector) List(ctx context.Context, topic string, f Filter) (List, error) {
	if err := f.Validate(); err != nil {
		return List{}, err
	}
	cl, err := kgo.NewClient(in.base...)
	if err != nil {
		return List{}, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	spans, err := spansOf(ctx, kadm.NewClient(cl), topic, f.Since)
	if err != nil {
		return List{}, err
	}
	out := List{Topic: topic, Entries: []Entry{}}
	per := map[int32][]Entry{}
	err = read(ctx, in.base, topic, spans, func(r *kgo.Record) bool {
		e := EntryOf(r)
		if !f.Match(e) {
			return true
		}
		per[r.Partition] = append(per[r.Partition], e)
		if f.Limit > 0 && len(per[r.Partition]) == f.Limit {
			// The oldest Limit of the topic are among each partition's oldest Limit.
			if r.Offset+1 < spans[r.Partition].to {
				out.Truncated = true
			}
			return false
		}
		return true
	})
	if err != nil {
		return List{}, err
	}
	for _, es := range per {
		out.Entries = append(out.Entries, es...)
	}
	slices.SortStableFunc(out.Entries, byAge)
	if f.Limit > 0 && len(out.Entries) > f.Limit {
		out.Entries, out.Truncated = out.Entries[:f.Limit], true
	}
	return out, nil
}

// Show returns the dead letter at partition/offset of topic.
func (in *Inspector) Show(ctx context.Context, topic string, partition int32, offset int64) (Entry, error) {
	cl, err := kgo.NewClient(in.base...)
	if err != nil {
		return Entry{}, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	spans, err := spansOf(ctx, kadm.NewClient(cl), topic, time.Time{})
	if err != nil {
		return Entry{}, err
	}
	s, ok := spans[partition]
	switch {
	case !ok:
		return Entry{}, fmt.Errorf("%w: %s has no partition %d (it has %d)", ErrNotFound, topic, partition, len(spans))
	case offset < s.from || offset >= s.to:
		held := "nothing"
		if s.to > s.from {
			held = fmt.Sprintf("offsets %d..%d", s.from, s.to-1)
		}
		return Entry{}, fmt.Errorf("%w: partition %d of %s holds %s, not %d", ErrNotFound, partition, topic, held, offset)
	}
	var found *kgo.Record
	err = read(ctx, in.base, topic, map[int32]span{partition: {from: offset, to: s.to}}, func(r *kgo.Record) bool {
		found = r
		return false
	})
	if err != nil {
		return Entry{}, err
	}
	if found == nil || found.Offset != offset {
		return Entry{}, fmt.Errorf("%w: nothing at %d/%d of %s (deleted by retention or compaction)", ErrNotFound, partition, offset, topic)
	}
	return EntryOf(found), nil
}

// byAge orders letters by the time they were written, then by position.
func byAge(a, b Entry) int {
	return cmp.Or(a.WrittenAt.Compare(b.WrittenAt), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
}

// span is the offsets [from, to) of one partition to read.
type span struct{ from, to int64 }

// spansOf returns, per partition of topic, the offsets from its first record
// (or the first written at or after since) to its current end.
func spansOf(ctx context.Context, adm *kadm.Client, topic string, since time.Time) (map[int32]span, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err = listErr(topic, ends, err); err != nil {
		return nil, err
	}
	var starts kadm.ListedOffsets
	if since.IsZero() {
		starts, err = adm.ListStartOffsets(ctx, topic)
	} else {
		starts, err = adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic)
	}
	if err = listErr(topic, starts, err); err != nil {
		return nil, err
	}
	out := map[int32]span{}
	ends.Each(func(o kadm.ListedOffset) {
		s := span{from: 0, to: o.Offset}
		if st, ok := starts.Lookup(topic, o.Partition); ok && st.Offset >= 0 {
			s.from = min(st.Offset, o.Offset)
		} else if !since.IsZero() {
			s.from = o.Offset // nothing written since
		}
		out[o.Partition] = s
	})
	return out, nil
}

func listErr(topic string, l kadm.ListedOffsets, err error) error {
	if err == nil {
		err = l.Error()
	}
	switch {
	case err == nil && len(l[topic]) == 0:
		return fmt.Errorf("%s: %w (run `waitroomctl topics ensure`)", topic, ErrNoTopic)
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("%s: %w (run `waitroomctl topics ensure`)", topic, ErrNoTopic)
	case err != nil:
		return fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	return nil
}

// read consumes spans of topic, each partition in offset order, and hands
// every record to fn until fn returns false for its partition or the
// partition reaches the end of its span.
func read(ctx context.Context, base []kgo.Opt, topic string, spans map[int32]span, fn func(*kgo.Record) bool) error {
	ks := make(map[int32]kclient.Span, len(spans))
	for p, s := range spans {
		ks[p] = kclient.Span{From: s.from, To: s.to}
	}
	o := kclient.ReadOptions{
		Client: []kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond)},
		Fatal: func(err error) bool { // data loss notices and retriable errors are not fatal
			var ke *kerr.Error
			return errors.As(err, &ke) && !ke.Retriable
		},
	}
	return kclient.ReadSpans(ctx, base, topic, ks, o, func(r *kgo.Record) error {
		if !fn(r) {
			return kclient.SkipPartition
		}
		return nil
	})
}
