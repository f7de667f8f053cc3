package kclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Span is the offsets [From, To) of one partition to read.
type Span struct{ From, To int64 }

// Spans lists, per partition of topic, the offsets from its first record
// still held to its end now: what ReadToEnd reads. The end is the last
// stable offset (what a read_committed reader reaches: past an open
// transaction nothing is readable yet); on a topic without transactions it
// is the high watermark. It costs two ListOffsets requests.
func Spans(ctx context.Context, adm *kadm.Client, topic string) (map[int32]Span, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if err := errors.Join(starts.Error(), ends.Error()); err != nil {
		return nil, fmt.Errorf("offsets of %s: %w", topic, err)
	}
	out := map[int32]Span{}
	ends.Each(func(e kadm.ListedOffset) {
		s, _ := starts.Lookup(topic, e.Partition)
		out[e.Partition] = Span{From: min(s.Offset, e.Offset), To: e.Offset}
	})
	return out, nil
}

// SkipPartition (a control value, like fs.SkipDir), returned by a ReadSpans
// callback, stops the reading of the record's partition; the others go on.
var SkipPartition = errors.New("skip the rest of this partition")

// SkipAll, returned by a ReadSpans callback, ends the read at once; ReadSpans
// returns nil.
var SkipAll = errors.New("skip everything left")

// ReadOptions tune ReadSpans.
type ReadOptions struct {
	// Fatal says whether a fetch error ends the read (nil: every one does).
	Fatal func(error) bool
	// Client adds options to the reading client (fetch sizes, waits).
	Client []kgo.Opt
}

// ReadSpans hands every record of topic within spans to fn, each partition
// in offset order (partitions interleaved), with a client of its own built
// from base and closed on return. fn's error ends the read and is returned,
// but for SkipPartition and SkipAll. It returns when every span was read.
func ReadSpans(ctx context.Context, base []kgo.Opt, topic string, spans map[int32]Span, o ReadOptions, fn func(*kgo.Record) error) error {
	at := map[int32]kgo.Offset{}
	left := map[int32]int64{} // partition -> end of its span, while unfinished
	for p, s := range spans {
		if s.From < s.To {
			at[p], left[p] = kgo.NewOffset().At(s.From), s.To
		}
	}
	if len(left) == 0 {
		return nil
	}
	// Read committed, keeping the control records (not handed to fn): a
	// transaction marker may be the last offset of a span.
	cl, err := kgo.NewClient(append(append(append([]kgo.Opt{}, base...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()), o.Client...)...)
	if err != nil {
		return fmt.Errorf("kafka client to read %s: %w", topic, err)
	}
	defer cl.Close()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: %d partitions unfinished: %w", topic, len(left), err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil && (o.Fatal == nil || o.Fatal(err)) {
				ferr = fmt.Errorf("read %s partition %d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		if err := eachInSpan(cl, fs, topic, left, fn); err != nil {
			return err
		}
	}
	return nil
}

// eachInSpan calls fn on fs's records still within their partition's span,
// dropping a partition from left (and pausing it) once done.
func eachInSpan(cl *kgo.Client, fs kgo.Fetches, topic string, left map[int32]int64, fn func(*kgo.Record) error) error {
	var stop error
	fs.EachRecord(func(r *kgo.Record) {
		end, ok := left[r.Partition]
		if stop != nil || !ok {
			return
		}
		done := r.Offset+1 >= end
		if r.Offset < end && !r.Attrs.IsControl() {
			switch err := fn(r); {
			case errors.Is(err, SkipPartition):
				done = true
			case err != nil:
				stop = err
				return
			}
		}
		if done || r.Offset >= end {
			delete(left, r.Partition)
			cl.PauseFetchPartitions(map[string][]int32{topic: {r.Partition}})
		}
	})
	if errors.Is(stop, SkipAll) {
		clear(left)
		return nil
	}
	return stop
}

// ReadToEnd hands every record topic holds now, from the first still held to
// the end at the time of the call, to fn, each partition in offset order:
// Spans, then ReadSpans.
func ReadToEnd(ctx context.Context, base []kgo.Opt, topic string, fn func(*kgo.Record) error) error {
	cl, err := kgo.NewClient(base...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	spans, err := Spans(ctx, kadm.NewClient(cl), topic)
	cl.Close()
	if err != nil {
		return err
	}
	return ReadSpans(ctx, base, topic, spans, ReadOptions{}, fn)
}
