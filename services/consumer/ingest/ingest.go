// Package ingest is the consumer service: it applies waitroom.registrations to
// the items' lines in Redis (in partition order, one pipelined round of Lua
// scripts per batch) and waitroom.items to the items' stored state, and sends
// what it cannot process to the topic's DLQ.
package ingest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/retry"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/consumer/consume"
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
	retry Retry
	chain consume.BatchHandler // compose's

	mu sync.Mutex
	// refused remembers ops Redis refused that are not dead-lettered yet, by
	// partition and offset. The enqueue and leave scripts move the item's
	// applied-offset guard before they can fail, so the same op comes back as
	// REPLAY when its batch is handled again (a failed DLQ write, Redis lost
	// mid-retry): this memory keeps such a REPLAY counted as the refusal it was.
	refused map[int32]map[int64]refusal
}

// refusal is the last refusal of an op by Redis and how often it was tried.
type refusal struct {
	err   error
	tries int
	final bool // no more tries: running it again could reorder the line
}

// NewRegistrations returns the registrations handler, applying to the lines
// in rdb.
func NewRegistrations(rdb redis.UniversalClient, items Items, dl DeadLetters, m *Metrics, log *zap.Logger, retry Retry) *Registrations {
	h := &Registrations{line: queue.New(rdb), items: items, dlq: dl, log: log, m: m,
		retry: retry.withDefaults(), refused: map[int32]map[int64]refusal{}}
	h.chain = h.compose()
	return h
}

// Handle applies one partition's records in order. Records that are not
// registrations, break the contract or name an unknown item go to the DLQ
// (their offset is still recorded, so status reports them as handled); the
// rest are applied in one pipelined round. An op Redis refuses (a corrupt key)
// is retried up to Retry.Attempts times with back-off, then dead-lettered as
// PROCESSING_ERROR. Any other error leaves the batch to be retried whole by
// the runner, which the applied-offset guard makes safe: while Redis is down
// nothing is dead-lettered.
func (h *Registrations) Handle(ctx context.Context, partition int32, recs []*kgo.Record) error {
	// A draw is applied alone, after the records before it and before those
	// after it (draw.go).
	for len(recs) > 0 {
		d := firstDraw(recs)
		if err := h.handle(ctx, partition, recs[:d]); err != nil {
			return err
		}
		if d == len(recs) {
			return nil
		}
		if err := h.draw(ctx, recs[d]); err != nil {
			return err
		}
		recs = recs[d+1:]
	}
	return nil
}

// handle applies records none of which is a draw, through the
// registrations' middleware (chain.go).
func (h *Registrations) handle(ctx context.Context, partition int32, recs []*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	return h.chain(ctx, partition, recs)
}

// judge decodes and checks recs: the ops to apply (with the record of each,
// nil for a mark) and the letters of records that break the contract.
func (h *Registrations) judge(ctx context.Context, recs []*kgo.Record) ([]queue.Op, []*kgo.Record, []dlq.Letter, error) {
	ops := make([]queue.Op, 0, len(recs))
	opRecord := make([]*kgo.Record, 0, len(recs)) // the record of each op
	var letters []dlq.Letter
	synced := false
	for _, r := range recs {
		ev, err := topics.DecodeRegistration(r.Value)
		if err == nil && string(r.Key) != ev.ItemID {
			err = fmt.Errorf("%w: record key %q differs from itemId %q", topics.ErrInvalid, r.Key, ev.ItemID)
		}
		if err == nil && ev.Kind == topics.KindDraw { // Handle applies draws alone (firstDraw): never here
			err = fmt.Errorf("draw record at offset %d reached the batch path", r.Offset)
		}
		if err == nil && ev.Kind == topics.KindRegister {
			if _, ok := h.items.Get(ev.ItemID); !ok && !synced {
				// The item may be newer than our cache: catch up once per batch before judging.
				if serr := h.items.Sync(ctx); serr != nil {
					return nil, nil, nil, fmt.Errorf("sync items before judging %s: %w", ev.ItemID, serr)
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
		op := queue.OpOf(&ev, r.Partition, r.Offset, r.Timestamp.UnixMilli())
		ops = append(ops, op)
		opRecord = append(opRecord, r)
	}
	return ops, opRecord, letters, nil
}

// markNew gives each place a register of the batch made, on an item with an
// idleTimeout, its first sign of life: the record's time (ZADD NX, so a poll
// seen before it was applied stands). A waiter who never polls is then
// released too. It runs for every register, replays included, so a batch
// retried after a failed write here still marks its places.
func (h *Registrations) markNew(ctx context.Context, ops []queue.Op, opRecord []*kgo.Record, res []queue.Result) error {
	var seen []queue.SeenAt
	for i, op := range ops {
		if op.Kind != queue.OpRegister || opRecord[i] == nil || res[i].Err != nil {
			continue
		}
		if it, ok := h.items.Get(op.ItemID); !ok || it.IdleTimeoutSeconds <= 0 {
			continue
		}
		tok := op.TokenID
		if res[i].Outcome == queue.Duplicate && res[i].TokenID != "" {
			tok = res[i].TokenID // the user's live place
		}
		seen = append(seen, queue.SeenAt{Item: op.ItemID, Member: queue.SeenMember(tok, op.UserID), AtMs: opRecord[i].Timestamp.UnixMilli()})
	}
	if err := h.line.MarkSeen(ctx, seen, true); err != nil {
		return fmt.Errorf("first signs of life of %d places: %w", len(seen), err)
	}
	return nil
}

// retryRefused re-runs the ops Redis refused, with back-off, until they pass
// or have been tried Retry.Attempts times; res and st are updated in place.
//
// A refused op cannot simply be sent again: its script wrote nothing, but
// the item's later ops in the batch moved the applied offset past it, so it
// would answer REPLAY. So, per item, the
// guard is rewound to just before the first refused op (a compare-and-set,
// only while it still holds this batch's offsets) and the item's ops from
// there on run again in order, as if they came for the first time. That is
// only sound when none of those later ops changed the line (ADDED, LEFT,
// ENDED): re-running them would reorder it, so such an item's refusals are
// dead-lettered without more retries.
func (h *Registrations) retryRefused(ctx context.Context, partition int32, ops []queue.Op, opRecord []*kgo.Record, res []queue.Result, st []refusal) error {
	waits := h.retry.policy().Waits()
	for {
		worth := map[string]bool{} // items with a refused op worth another try
		for i := range ops {
			if st[i].err != nil && !st[i].final && st[i].tries < h.retry.Attempts {
				worth[ops[i].ItemID] = true
			}
		}
		if len(worth) == 0 {
			return nil
		}
		if err := retry.Sleep(ctx, waits.NextBackOff()); err != nil {
			return fmt.Errorf("retry refused records of partition %d: %w", partition, err)
		}
		var again []int // indexes of the ops to run again, in batch order
		for _, item := range slices.Sorted(maps.Keys(worth)) {
			tail, ok, err := h.reopen(ctx, partition, item, ops, res, st)
			if err != nil {
				return err
			}
			if !ok {
				for i := range ops {
					if ops[i].ItemID == item && st[i].err != nil {
						st[i].final = true
					}
				}
				continue
			}
			again = append(again, tail...)
		}
		if len(again) == 0 {
			return nil
		}
		slices.Sort(again)
		sub := make([]queue.Op, len(again))
		for j, i := range again {
			sub[j] = ops[i]
		}
		out, err := h.line.Apply(ctx, sub)
		if err != nil {
			return fmt.Errorf("retry %d ops of partition %d: %w", len(sub), partition, err)
		}
		for j, i := range again {
			res[i] = out[j]
			if opRecord[i] == nil {
				continue
			}
			switch {
			case out[j].Err != nil:
				h.m.recordRetries.WithLabelValues(topics.Registrations).Inc()
				st[i] = refusal{err: out[j].Err, tries: st[i].tries + 1}
			case st[i].err != nil && out[j].Outcome == queue.Replay:
				st[i].final = true // the rewind did not hold: dead-letter as is
			default:
				if st[i].err != nil {
					h.m.recordRetries.WithLabelValues(topics.Registrations).Inc()
					h.log.Info("refused registration applied on retry", zap.Int32("partition", partition),
						zap.Int64("offset", ops[i].Offset), zap.Int("tries", st[i].tries+1))
				}
				st[i] = refusal{}
			}
		}
	}
}

// reopen rewinds item's applied-offset guard to just before its first refused
// op and returns the indexes of the item's ops from that one on; ok is false
// when they cannot run again without reordering the line.
func (h *Registrations) reopen(ctx context.Context, partition int32, item string, ops []queue.Op, res []queue.Result, st []refusal) (tail []int, ok bool, err error) {
	first := -1
	var last int64
	for i, op := range ops {
		if op.ItemID != item {
			continue
		}
		last = op.Offset
		if first < 0 && st[i].err == nil {
			continue
		}
		if first < 0 {
			first = i
		}
		tail = append(tail, i)
		if st[i].err != nil || res[i].Err != nil {
			continue
		}
		switch res[i].Outcome {
		case queue.Marked, queue.Duplicate, queue.NotInLine, queue.Exhausted: // only the guard moved
		default:
			return nil, false, nil
		}
	}
	if first < 0 {
		return nil, false, nil
	}
	ok, err = h.line.Rewind(ctx, item, partition, ops[first].Offset, last)
	return tail, ok, err
}

func (h *Registrations) lookup(partition int32, offset int64) (refusal, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.refused[partition][offset]
	return r, ok
}

// remember keeps the refusals of ops still refused, and forgets every op of
// the batch once its letters are written.
func (h *Registrations) remember(partition int32, ops []queue.Op, st []refusal, sent bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.refused[partition]
	for i, op := range ops {
		switch {
		case st[i].err != nil && !sent:
			if m == nil {
				m = map[int64]refusal{}
				h.refused[partition] = m
			}
			m[op.Offset] = st[i]
		case m != nil:
			delete(m, op.Offset)
		}
	}
}

// forgetBefore drops what is remembered of offsets before a batch of the
// partition: those are committed.
func (h *Registrations) forgetBefore(partition int32, offset int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for off := range h.refused[partition] {
		if off < offset {
			delete(h.refused[partition], off)
		}
	}
}

// Retry is how a record Redis refuses (a corrupt key: WRONGTYPE and the like)
// is retried before it is dead-lettered as PROCESSING_ERROR. Trouble with
// Redis itself (down, loading, failing over) is never this: it pauses the
// partition until Redis is back.
type Retry struct {
	// Attempts in all, the first included (default 3; 1 dead-letters at once).
	Attempts int
	// Backoff before the first retry, doubled before each next up to 30 s
	// (default 100ms).
	Backoff time.Duration
}

// policy is r as the back-off of pkg/foundation/retry.
func (r Retry) policy() retry.Policy {
	return retry.Policy{Initial: r.Backoff, Attempts: r.Attempts}
}

func (r Retry) withDefaults() Retry {
	if r.Attempts <= 0 {
		r.Attempts = 3
	}
	if r.Backoff <= 0 {
		r.Backoff = 100 * time.Millisecond
	}
	return r
}

// Metrics of the consumer service.
type Metrics struct {
	batch       prometheus.Histogram
	applied     *prometheus.CounterVec
	deadLetters *prometheus.CounterVec
	retries     *prometheus.CounterVec
	// recordRetries counts retries of single records Redis refused.
	recordRetries *prometheus.CounterVec
	lag           *prometheus.GaugeVec
	// abandoned counts idle places released (abandon records applied).
	abandoned prometheus.Counter
}

// forgetLag drops the lag of partitions this member no longer holds (revoked
// or lost): the member that takes one over reports it, and a series left at
// its last value would be summed beside that member's for ever.
func (m *Metrics) forgetLag(parts map[string][]int32) {
	for t, ps := range parts {
		for _, p := range ps {
			m.lag.DeleteLabelValues(t, strconv.Itoa(int(p)))
		}
	}
}

// forgetLagOf is forgetLag as a group callback.
func (m *Metrics) forgetLagOf(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	m.forgetLag(parts)
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
		recordRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "waitroom_consumer_record_retries_total", Help: "Retries of single records Redis refused (a corrupt key) before they pass or are dead-lettered.",
		}, []string{"topic"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "waitroom_consumer_lag_records", Help: "Records behind the partition's high watermark after the last batch.",
		}, []string{"topic", "partition"}),
	}
	m.abandoned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "waitroom_consumer_abandoned_total", Help: "Waiting places released because their holder neither polled nor held a stream for the item's idleTimeout.",
	})
	// Every (topic, error type) a dead letter can have, and every topic's
	// batch retries, are exported from the start, at 0: a series born at 1
	// with the first letter or retry shows no increase(), and
	// WaitroomDeadLettersGrowing or WaitroomConsumerStuck would miss it.
	for _, t := range []string{topics.Registrations, topics.Items} {
		for _, e := range []string{topics.ErrorTypeParsing, topics.ErrorTypeValidation, topics.ErrorTypeProcessing} {
			m.deadLetters.WithLabelValues(t, e)
		}
		m.retries.WithLabelValues(t)
	}
	reg.MustRegister(m.batch, m.applied, m.deadLetters, m.retries, m.recordRetries, m.lag, m.abandoned)
	return m
}
