package promote

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/waitroom/waitroom/pkg/kafka/fence"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// output is the producer of shard sh's writes to waitroom.admissions, made
// ready: with TxnPrefix a transactional producer of the shard's id, whose
// InitProducerID fences the shard's earlier leader; without, the Producer.
func (s *Scheduler) output(ctx context.Context, sh int) (Producer, error) {
	if s.opt.TxnPrefix == "" {
		return s.prod, nil
	}
	s.closeOutput(sh) // a new leadership takes the id over afresh
	p := fence.NewProducer(fence.ID(s.opt.TxnPrefix, sh), s.opt.TxnOpts...)
	if err := p.Ready(ctx); err != nil {
		return nil, err
	}
	s.txns[sh] = p
	return p, nil
}

// shardOutput is the producer output made for shard sh (the Producer
// without TxnPrefix).
func (s *Scheduler) shardOutput(sh int) Producer {
	if p := s.txns[sh]; p != nil {
		return p
	}
	return s.prod
}

// closeOutput closes shard sh's transactional producer, if any.
func (s *Scheduler) closeOutput(sh int) {
	if p := s.txns[sh]; p != nil {
		p.Close()
		delete(s.txns, sh)
	}
}

// outputReady makes a transactional out ready again after a failed
// transaction; false (logged) when it cannot be: nothing is published this
// tick.
func (s *Scheduler) outputReady(ctx context.Context, out Producer) bool {
	p, ok := out.(*fence.Producer)
	if !ok {
		return true
	}
	if err := p.Ready(ctx); err != nil {
		s.log.Warn("take the shard's transactional id again; the tick's admissions go out later", zap.Error(err))
		return false
	}
	return true
}

// beforePublish is a test hook: it runs after a tick's view was confirmed
// again, right before its admissions are published.
func (s *Scheduler) beforePublish() {
	if s.hookPublish != nil {
		s.hookPublish()
	}
}

// committedPast raises next (per partition of waitroom.admissions, the
// offset after the last event a transaction of out wrote) to the
// partition's last stable offset once that is past the event: then the
// transaction's commit marker, written by the coordinator after the commit
// returned, is behind it too. It waits at most 250 ms for it (another
// leader's transaction open on the partition holds the last stable offset
// back until it ends); a plain Producer's next is left as it is.
func committedPast(ctx context.Context, out Producer, next map[int32]int64) error {
	p, ok := out.(*fence.Producer)
	if !ok || p.Client() == nil {
		return nil
	}
	adm := kadm.NewClient(p.Client())
	deadline := time.Now().Add(250 * time.Millisecond)
	for wait := 5 * time.Millisecond; ; wait *= 2 {
		lso, err := adm.ListCommittedOffsets(ctx, topics.Admissions)
		if err == nil {
			err = lso.Error()
		}
		if err != nil {
			return fmt.Errorf("list committed offsets of %s: %w", topics.Admissions, err)
		}
		short := false
		for part, n := range next {
			o, ok := lso.Lookup(topics.Admissions, part)
			if ok && o.Offset > n-1 {
				next[part] = max(n, o.Offset)
			} else {
				short = true
			}
		}
		if !short || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}
