// Package follow reads a whole topic from its start on every replica (no
// consumer group), hands each fetch to the caller's in-memory view, and
// says when the view has caught up with what the topic held.
package follow

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// Reader follows one topic.
type Reader struct {
	cl    *kgo.Client
	adm   *kadm.Client
	topic string
	log   *zap.Logger

	mu       sync.Mutex
	next     map[int32]int64 // next offset to read, per partition
	progress chan struct{}   // closed and replaced after every applied fetch
}

// New returns a Reader of topic from its start with a client built from
// base (seed brokers, logger...).
func New(base []kgo.Opt, topic string, log *zap.Logger) (*Reader, error) {
	opts := append(append([]kgo.Opt{}, base...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("%s reader kafka client: %w", topic, err)
	}
	return &Reader{cl: cl, adm: kadm.NewClient(cl), topic: topic, log: log, next: map[int32]int64{}, progress: make(chan struct{})}, nil
}

// Run reads the topic until ctx ends, then closes the client. apply gets
// every fetch with records and must have made them visible when it
// returns: only then does Sync count them as read.
func (r *Reader) Run(ctx context.Context, apply func(kgo.Fetches)) error {
	defer r.cl.Close()
	for {
		fs := r.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			r.log.Warn("fetch", zap.String("topic", t), zap.Int32("partition", p), zap.Error(err))
		})
		if fs.NumRecords() == 0 {
			continue
		}
		apply(fs)
		r.mu.Lock()
		fs.EachRecord(func(rec *kgo.Record) { r.next[rec.Partition] = rec.Offset + 1 })
		close(r.progress)
		r.progress = make(chan struct{})
		r.mu.Unlock()
	}
}

// Sync waits until every record the topic held when Sync was called has
// been applied.
func (r *Reader) Sync(ctx context.Context) error {
	ends, err := r.adm.ListEndOffsets(ctx, r.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("%s: list end offsets: %w", r.topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	for {
		r.mu.Lock()
		done := true
		for p, end := range want {
			if r.next[p] < end {
				done = false
				break
			}
		}
		wait := r.progress
		r.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("%s: sync: %w", r.topic, errors.Join(ctx.Err(), context.Cause(ctx)))
		}
	}
}
