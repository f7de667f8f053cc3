// Package ingest is the consumer service: it applies waitroom.registrations to
// the items' lines in Redis (in partition order, one pipelined round of Lua
// scripts per batch) and waitroom.items to the items' stored state, and sends
// what it cannot process to the topic's DLQ.
package ingest

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/dlq"
	"github.com/waitroom/waitroom/pkg/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Items tells whether an item exists (the in-memory item cache).
type Items interface {
	Get(item string) (topics.ItemState, bool)
	// Sync waits until every item published so far is known.
	Sync(ctx context.Context) error
}

// DeadLetters takes records that cannot be processed (*dlq.Writer).
type DeadLetters interface {
	Send(ctx context.Context, letters ...dlq.Letter) error
}

// Registrations applies registration records to the lines.
type Registrations struct {
	line  *queue.Line
	items Items
	dlq   DeadLetters
	log   *zap.Logger
	m     *Metrics
}

// NewRegistrations returns the registrations handler.
func NewRegistrations(line *queue.Line, items Items, dl DeadLetters, m *Metrics, log *zap.Logger) *Registrations {
	return &Registrations{line: line, items: items, dlq: dl, log: log, m: m}
}

// Handle applies one partition's records in order. Records that are not
// registrations, break the contract or name an unknown item go to the DLQ
// (their offset is still recorded, so status reports them as handled); the
// rest are applied in one pipelined round. Any error leaves the batch to be
// retried whole, which the applied-offset guard makes safe.
func (h *Registrations) Handle(ctx context.Context, partition int32, recs []*kgo.Record) error {
	ops := make([]queue.Op, 0, len(recs))
	opRecord := make([]*kgo.Record, 0, len(recs)) // the record of each op
	var letters []dlq.Letter
	synced := false
	for _, r := range recs {
		ev, err := topics.DecodeRegistration(r.Value)
		if err == nil && string(r.Key) != ev.ItemID {
			err = fmt.Errorf("%w: record key %q differs from itemId %q", topics.ErrInvalid, r.Key, ev.ItemID)
		}
		if err == nil && ev.Kind == topics.KindRegister {
			if _, ok := h.items.Get(ev.ItemID); !ok && !synced {
				// The item may be newer than our cache: catch up once per batch before judging.
				if serr := h.items.Sync(ctx); serr != nil {
					return fmt.Errorf("sync items before judging %s: %w", ev.ItemID, serr)
				}
				synced = true
			}
			if _, ok := h.items.Get(ev.ItemID); !ok {
				err = fmt.Errorf("%w: unknown item %q", topics.ErrInvalid, ev.ItemID)
			}
		}
		if err != nil {
			letters = append(letters, dlq.Letter{Record: r, Err: err, Attempts: 1})
			if item := string(r.Key); topics.ValidID(item) {
				ops = append(ops, queue.Op{Kind: queue.OpMark, ItemID: item, Partition: r.Partition, Offset: r.Offset})
				opRecord = append(opRecord, nil) // already dead-lettered above
			}
			continue
		}
		var kind queue.OpKind
		switch ev.Kind {
		case topics.KindRegister:
			kind = queue.OpRegister
		case topics.KindLeave:
			kind = queue.OpLeave
		case topics.KindComplete:
			kind = queue.OpComplete
		}
		ops = append(ops, queue.Op{Kind: kind, ItemID: ev.ItemID, TokenID: ev.TokenID, UserID: ev.UserID, Partition: r.Partition, Offset: r.Offset})
		opRecord = append(opRecord, r)
	}
	res, err := h.line.Apply(ctx, ops)
	if err != nil {
		return fmt.Errorf("apply partition %d batch of %d: %w", partition, len(ops), err)
	}
	for i, r := range res {
		if r.Err != nil && opRecord[i] != nil {
			letters = append(letters, dlq.Letter{Record: opRecord[i], Err: r.Err, Attempts: 1})
			continue
		}
		h.m.applied.WithLabelValues(string(r.Outcome)).Inc()
	}
	if err := h.dlq.Send(ctx, letters...); err != nil {
		return err
	}
	h.m.batch.Observe(float64(len(ops)))
	for _, l := range letters {
		h.m.deadLetters.WithLabelValues(topics.Registrations, dlq.ErrorType(l.Err)).Inc()
		h.log.Warn("registration dead-lettered", zap.Int32("partition", l.Record.Partition), zap.Int64("offset", l.Record.Offset), zap.Error(l.Err))
	}
	return nil
}

// ItemStates applies item records to the items' stored state.
type ItemStates struct {
	line *queue.Line
	dlq  DeadLetters
	log  *zap.Logger
	m    *Metrics
}

// NewItemStates returns the items handler.
func NewItemStates(line *queue.Line, dl DeadLetters, m *Metrics, log *zap.Logger) *ItemStates {
	return &ItemStates{line: line, dlq: dl, log: log, m: m}
}

// Handle applies one partition's item records in order, with the version check
// in Redis making repeats harmless.
func (h *ItemStates) Handle(ctx context.Context, partition int32, recs []*kgo.Record) error {
	var letters []dlq.Letter
	for _, r := range recs {
		if r.Value == nil {
			if topics.ValidID(string(r.Key)) {
				if err := h.line.DeleteItem(ctx, string(r.Key)); err != nil {
					return err
				}
				continue
			}
			letters = append(letters, dlq.Letter{Record: r, Err: fmt.Errorf("%w: tombstone with key %q", topics.ErrInvalid, r.Key)})
			continue
		}
		s, err := topics.DecodeItem(r.Value)
		if err == nil && string(r.Key) != s.ItemID {
			err = fmt.Errorf("%w: record key %q differs from itemId %q", topics.ErrInvalid, r.Key, s.ItemID)
		}
		if err != nil {
			letters = append(letters, dlq.Letter{Record: r, Err: err, Attempts: 1})
			continue
		}
		if _, err := h.line.ApplyItem(ctx, s); err != nil {
			return err // Redis trouble: the runner retries the batch
		}
	}
	if err := h.dlq.Send(ctx, letters...); err != nil {
		return err
	}
	for _, l := range letters {
		h.m.deadLetters.WithLabelValues(topics.Items, dlq.ErrorType(l.Err)).Inc()
		h.log.Warn("item record dead-lettered", zap.Int32("partition", l.Record.Partition), zap.Int64("offset", l.Record.Offset), zap.Error(l.Err))
	}
	return nil
}

// Metrics of the consumer service.
type Metrics struct {
	batch       prometheus.Histogram
	applied     *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
	retries     *prometheus.CounterVec
	lag         *prometheus.GaugeVec
}

// NewMetrics registers the consumer's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "waitroom_consumer_enqueue_batch_size", Help: "Records applied to Redis in one pipelined round.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_consumer_applied_total", Help: "Registration records applied, by outcome (ADDED, DUPLICATE, REPLAY...).",
		}, []string{"outcome"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_consumer_dead_letters_total", Help: "Records sent to a DLQ, by source topic and error type.",
		}, []string{"topic", "error_type"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_consumer_batch_retries_total", Help: "Failed batch attempts that were retried (Redis or Kafka trouble).",
		}, []string{"topic"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "waitroom_consumer_lag_records", Help: "Records behind the partition's high watermark after the last batch.",
		}, []string{"topic", "partition"}),
	}
	reg.MustRegister(m.batch, m.applied, m.deadLetters, m.retries, m.lag)
	return m
}
