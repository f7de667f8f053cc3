package ingest

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/consumer/consume"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// regBatch is a batch of registrations on its way through the handler's
// middleware. It stays batch-shaped: the ops go to Redis in one pipelined
// round (one script call per op), and so do their retries.
type regBatch struct {
	partition int32
	ops       []queue.Op
	opRecord  []*kgo.Record  // the record of each op; nil for the mark of a record dead-lettered
	res       []queue.Result // each op's answer, once applied
	st        []refusal      // per op: its refusal by Redis, if any, and the tries so far; nil until applied
	letters   []dlq.Letter   // the records to dead-letter
}

// regFunc handles a batch of registrations. An error is a failed call: the
// batch is not committed and comes again whole; a record's own fault is a
// letter in the batch, never an error.
type regFunc func(ctx context.Context, b *regBatch) error

// compose builds the registrations' handler from its middleware, outermost
// first: decode (a record that breaks the contract becomes a letter and a
// mark) → report (metrics and logs of the batch) → first signs of life →
// dead-letter (the bad records and those Redis kept refusing, in one write;
// a failed write fails the batch) → count (the outcomes applied) → bounded
// retry of what Redis refused → apply. The view gate (Gated) wraps Handle.
func (h *Registrations) compose() consume.BatchHandler {
	return h.decode(h.report(h.markSeen(h.deadLetter(h.count(h.retried(h.apply))))))
}

// decode turns the records into ops (judge); those that break the contract
// become letters, with a mark of their offset when their key is an item's.
func (h *Registrations) decode(next regFunc) consume.BatchHandler {
	return func(ctx context.Context, partition int32, recs []*kgo.Record) error {
		h.forgetBefore(partition, recs[0].Offset)
		ops, opRecord, letters, err := h.judge(ctx, recs)
		if err != nil {
			return err
		}
		return next(ctx, &regBatch{partition: partition, ops: ops, opRecord: opRecord, letters: letters})
	}
}

// apply runs the batch's ops in one pipelined round.
func (h *Registrations) apply(ctx context.Context, b *regBatch) error {
	res, err := h.line.Apply(ctx, b.ops)
	if err != nil {
		return fmt.Errorf("apply partition %d batch of %d: %w", b.partition, len(b.ops), err)
	}
	b.res = res
	return nil
}

// retried notes each op Redis refused (or refused in an earlier attempt at
// this batch, remembered until its letter is written), then retries them
// with back-off up to Retry.Attempts tries (retryRefused).
func (h *Registrations) retried(next regFunc) regFunc {
	return func(ctx context.Context, b *regBatch) error {
		if err := next(ctx, b); err != nil {
			return err
		}
		b.st = make([]refusal, len(b.ops))
		for i := range b.ops {
			if b.opRecord[i] == nil { // a mark of a record dead-lettered above
				continue
			}
			prev, ok := h.lookup(b.partition, b.ops[i].Offset)
			switch {
			case ok && prev.tries >= h.retry.Attempts && (b.res[i].Err != nil || b.res[i].Outcome == queue.Replay):
				b.st[i] = prev // given up on by an earlier attempt at this batch, whose letters were not written
			case b.res[i].Err != nil:
				b.st[i] = refusal{err: b.res[i].Err, tries: prev.tries + 1}
			case ok && b.res[i].Outcome == queue.Replay:
				b.st[i] = prev // refused by an earlier attempt at this batch, not applied
			}
		}
		return h.retryRefused(ctx, b.partition, b.ops, b.opRecord, b.res, b.st)
	}
}

// count counts the outcomes applied (not refused) once the retries are done.
func (h *Registrations) count(next regFunc) regFunc {
	return func(ctx context.Context, b *regBatch) error {
		if err := next(ctx, b); err != nil {
			return err
		}
		for i, r := range b.res {
			if b.st[i].err != nil {
				continue
			}
			h.m.applied.WithLabelValues(string(r.Outcome)).Inc()
			if r.Outcome == queue.Released {
				h.m.abandoned.Inc()
			}
		}
		return nil
	}
}

// deadLetter writes the letters of the bad records and of those Redis kept
// refusing, in one write; a failed write fails the batch (a nack). Until the
// letters are written the refusals are remembered for the batch's next
// attempt, whose ops then answer REPLAY.
func (h *Registrations) deadLetter(next regFunc) regFunc {
	return func(ctx context.Context, b *regBatch) error {
		sent := false
		defer func() {
			if b.st != nil {
				h.remember(b.partition, b.ops, b.st, sent)
			}
		}()
		if err := next(ctx, b); err != nil {
			return err
		}
		for i := range b.res {
			if b.st[i].err != nil {
				b.letters = append(b.letters, dlq.Letter{Record: b.opRecord[i], Err: b.st[i].err, Attempts: b.st[i].tries})
			}
		}
		if err := h.dlq.Send(ctx, b.letters...); err != nil {
			return err
		}
		sent = true
		return nil
	}
}

// markSeen gives the places the batch made on items with an idleTimeout
// their first sign of life (markNew), once the letters are written.
func (h *Registrations) markSeen(next regFunc) regFunc {
	return func(ctx context.Context, b *regBatch) error {
		if err := next(ctx, b); err != nil {
			return err
		}
		return h.markNew(ctx, b.ops, b.opRecord, b.res)
	}
}

// report observes the batch's size and counts and logs its letters, once
// the batch is done.
func (h *Registrations) report(next regFunc) regFunc {
	return func(ctx context.Context, b *regBatch) error {
		if err := next(ctx, b); err != nil {
			return err
		}
		h.m.batch.Observe(float64(len(b.ops)))
		for _, l := range b.letters {
			h.m.deadLetters.WithLabelValues(topics.Registrations, dlq.ErrorType(l.Err)).Inc()
			h.log.Warn("registration dead-lettered", zap.Int32("partition", l.Record.Partition), zap.Int64("offset", l.Record.Offset),
				zap.Int("attempts", max(l.Attempts, 1)), zap.Error(l.Err))
		}
		return nil
	}
}
