package ingest

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// ItemStates applies item records to the items' stored state.
type ItemStates struct {
	handle func(ctx context.Context, partition int32, recs []*kgo.Record) error
}

// NewItemStates returns the items handler, composed here from its
// middleware: dead-lettering (with its metrics and log) ← decoding ← the
// apply, a tombstone's delete as is and a state's with bounded retry.
func NewItemStates(line *queue.Line, dl DeadLetters, m *Metrics, log *zap.Logger, retry Retry) *ItemStates {
	retry = retry.withDefaults()
	// apply_item fails before it writes anything, so a retry really runs again.
	applyState := retried(retry.policy(), queue.IsRecordError,
		func() { m.recordRetries.WithLabelValues(topics.Items).Inc() },
		func(ctx context.Context, s topics.ItemState) error {
			_, err := line.ApplyItem(ctx, s)
			return err
		})
	apply := func(ctx context.Context, it itemRecord) error {
		if it.state == nil {
			return line.DeleteItem(ctx, it.key) // never retried here: the runner retries the batch
		}
		return applyState(ctx, *it.state)
	}
	sent := func(l dlq.Letter) {
		m.deadLetters.WithLabelValues(topics.Items, dlq.ErrorType(l.Err)).Inc()
		log.Warn("item record dead-lettered", zap.Int32("partition", l.Record.Partition), zap.Int64("offset", l.Record.Offset),
			zap.Int("attempts", max(l.Attempts, 1)), zap.Error(l.Err))
	}
	return &ItemStates{handle: deadLettered(dl, sent, decoded(decodeItem, apply))}
}

// Handle applies one partition's item records in order, with the version check
// in Redis making repeats harmless. A state Redis refuses (a corrupt key) is
// retried Retry.Attempts times with back-off, then dead-lettered; trouble
// with Redis itself fails the batch, which the runner retries.
func (h *ItemStates) Handle(ctx context.Context, partition int32, recs []*kgo.Record) error {
	return h.handle(ctx, partition, recs)
}

// itemRecord is a decoded waitroom.items record: a state, or the tombstone
// (state nil) of the item key.
type itemRecord struct {
	key   string
	state *topics.ItemState
}

// decodeItem decodes an item record; an error is the record's (it breaks
// the contract).
func decodeItem(r *kgo.Record) (itemRecord, error) {
	if r.Value == nil {
		if p := topics.ItemIDProblem(string(r.Key)); p != "" {
			return itemRecord{}, fmt.Errorf("%w: tombstone with key %q: %s", topics.ErrInvalid, r.Key, p)
		}
		return itemRecord{key: string(r.Key)}, nil
	}
	s, err := topics.DecodeItem(r.Value)
	if err == nil && string(r.Key) != s.ItemID {
		err = fmt.Errorf("%w: record key %q differs from itemId %q", topics.ErrInvalid, r.Key, s.ItemID)
	}
	if p := topics.ItemIDProblem(s.ItemID); err == nil && p != "" {
		err = fmt.Errorf("%w: %s", topics.ErrInvalid, p)
	}
	if err != nil {
		return itemRecord{}, err
	}
	return itemRecord{key: s.ItemID, state: &s}, nil
}
