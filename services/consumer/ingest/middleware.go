package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/retry"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/services/consumer/consume"
)

// A record handler in middleware (Watermill's shape): deadLettered turns a
// handler of one record into a batch handler and sends the bad records to the
// DLQ; decoded turns a record into the value its apply takes; retried retries
// an apply Redis refuses. Each keeps the two error classes apart: a
// *badRecord is the record's fault and is dead-lettered; any other error is a
// failed call (Redis or Kafka down) and fails the batch, which is then left
// uncommitted and never dead-lettered.

// badRecord is the error of a record to dead-letter: it breaks the contract,
// or Redis refused it attempts times.
type badRecord struct {
	err      error
	attempts int
}

func (b *badRecord) Error() string { return b.err.Error() }
func (b *badRecord) Unwrap() error { return b.err }

// recordFunc handles one record of a batch.
type recordFunc func(ctx context.Context, r *kgo.Record) error

// applyFunc applies one decoded value.
type applyFunc[T any] func(ctx context.Context, v T) error

// deadLettered runs next on each record of a batch, in order. The records it
// finds bad go to dl in one write after the batch, and each is then told to
// sent (metrics, log). A failed call, or a failed write of the letters, fails
// the batch at once (a nack: the runner retries it whole, the applies being
// idempotent).
func deadLettered(dl DeadLetters, sent func(dlq.Letter), next recordFunc) consume.BatchHandler {
	return func(ctx context.Context, _ int32, recs []*kgo.Record) error {
		var letters []dlq.Letter
		for _, r := range recs {
			err := next(ctx, r)
			var bad *badRecord
			switch {
			case err == nil:
			case errors.As(err, &bad):
				letters = append(letters, dlq.Letter{Record: r, Err: bad.err, Attempts: bad.attempts})
			default:
				return err
			}
		}
		if err := dl.Send(ctx, letters...); err != nil {
			return err
		}
		for _, l := range letters {
			sent(l)
		}
		return nil
	}
}

// decoded decodes each record with decode and applies the value with next; a
// record decode refuses is bad, after one attempt.
func decoded[T any](decode func(*kgo.Record) (T, error), next applyFunc[T]) recordFunc {
	return func(ctx context.Context, r *kgo.Record) error {
		v, err := decode(r)
		if err != nil {
			return &badRecord{err: err, attempts: 1}
		}
		return next(ctx, v)
	}
}

// retried runs next up to p.Attempts times, with p's back-off between, while
// refused says its error is the record's (a script Redis refuses for a
// corrupt key); then the value is bad, with the tries made. Any other error
// is returned at once, as is the last one when ctx ends while waiting. Only
// for an apply that writes nothing when it fails, so a retry really runs
// again. onRetry is told about each retry.
func retried[T any](p retry.Policy, refused func(error) bool, onRetry func(), next applyFunc[T]) applyFunc[T] {
	return func(ctx context.Context, v T) error {
		tries := 0
		err := retry.Do(ctx, p, func(ctx context.Context) error {
			tries++
			err := next(ctx, v)
			if err != nil && !refused(err) {
				return retry.Permanent(err)
			}
			return err
		}, func(int, error, time.Duration) { onRetry() })
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("retry refused record: %w", err)
		case !refused(err):
			return err
		}
		return &badRecord{err: err, attempts: tries}
	}
}
