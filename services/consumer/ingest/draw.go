package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/retry"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// firstDraw is the index of the first draw record of recs (len(recs): none).
// Only a record whose bytes could name the draw kind is decoded here.
func firstDraw(recs []*kgo.Record) int {
	for i, r := range recs {
		if !mayBeDraw(r.Value) {
			continue
		}
		if ev, err := topics.DecodeRegistration(r.Value); err == nil && ev.Kind == topics.KindDraw {
			return i
		}
	}
	return len(recs)
}

// mayBeDraw reports bytes that hold "draw" in any case, or an escape (JSON
// could spell the kind with one): every draw record does.
func mayBeDraw(v []byte) bool {
	for i := 0; i < len(v); i++ {
		switch {
		case v[i] == '\\':
			return true
		case v[i]|0x20 == 'd' && i+3 < len(v) && v[i+1]|0x20 == 'r' && v[i+2]|0x20 == 'a' && v[i+3]|0x20 == 'w':
			return true
		}
	}
	return false
}

// draw applies a draw record: its revealed seed must hash to its commitment
// in its round, and must not reuse a round of the chain already drawn, else
// the record is dead-lettered (VALIDATION_ERROR). A draw of a window already
// drawn (a second scheduler published it too) only records its offset.
func (h *Registrations) draw(ctx context.Context, r *kgo.Record) error {
	ev, err := topics.DecodeRegistration(r.Value)
	if err == nil && string(r.Key) != ev.ItemID {
		err = fmt.Errorf("%w: record key %q differs from itemId %q", topics.ErrInvalid, r.Key, ev.ItemID)
	}
	var op queue.DrawOp
	if err == nil {
		op = queue.DrawOf(&ev, r.Partition, r.Offset)
		if cerr := h.line.CheckDraw(ctx, op); errors.Is(cerr, topics.ErrInvalid) {
			err = cerr
		} else if cerr != nil {
			return cerr // Redis trouble: the runner retries the batch
		}
	}
	if err != nil {
		return h.deadLetterDraw(ctx, r, err, 1)
	}
	d := ev.Draw
	var res queue.DrawResult
	tries := 0
	err = retry.Do(ctx, h.retry.policy(), func(ctx context.Context) error {
		tries++
		var err error
		res, err = h.line.Draw(ctx, op)
		if err != nil && !queue.IsRecordError(err) {
			return retry.Permanent(err)
		}
		return err
	}, func(int, error, time.Duration) { h.m.recordRetries.WithLabelValues(topics.Registrations).Inc() })
	switch {
	case err == nil:
	case ctx.Err() != nil || !queue.IsRecordError(err):
		return fmt.Errorf("draw of %s at offset %d: %w", ev.ItemID, r.Offset, err)
	default:
		h.log.Error("draw refused by Redis; the line may hold part of it", zap.String("item", ev.ItemID), zap.Error(err))
		return h.deadLetterDraw(ctx, r, err, tries)
	}
	h.m.applied.WithLabelValues(string(res.Outcome)).Inc()
	h.log.Info("draw applied", zap.String("item", ev.ItemID), zap.Int64("window", d.Window), zap.Int64("round", d.Round),
		zap.String("outcome", string(res.Outcome)), zap.Int64("placed", res.Placed), zap.Int64("late", res.Late))
	return nil
}

// deadLetterDraw sends r to the DLQ, then records its offset as handled.
// The letter goes first: a mark written before a failed letter would make
// the batch's next attempt find the draw applied (REPLAY) and pass it over,
// neither drawn nor dead-lettered. A mark that fails after the letter only
// lets the draw be tried (and, refused again, dead-lettered) once more.
func (h *Registrations) deadLetterDraw(ctx context.Context, r *kgo.Record, cause error, tries int) error {
	if err := h.dlq.Send(ctx, dlq.Letter{Record: r, Err: cause, Attempts: tries}); err != nil {
		return err
	}
	if item := string(r.Key); topics.ValidID(item) {
		res, err := h.line.Apply(ctx, []queue.Op{{Kind: queue.OpMark, ItemID: item, Partition: r.Partition, Offset: r.Offset}})
		if err != nil {
			return fmt.Errorf("mark dead-lettered draw: %w", err)
		}
		if res[0].Err != nil {
			return fmt.Errorf("mark dead-lettered draw: %w", res[0].Err)
		}
	}
	h.m.deadLetters.WithLabelValues(topics.Registrations, dlq.ErrorType(cause)).Inc()
	h.log.Warn("draw dead-lettered", zap.Int32("partition", r.Partition), zap.Int64("offset", r.Offset), zap.Error(cause))
	return nil
}
