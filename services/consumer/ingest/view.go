package ingest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/services/consumer/consume"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// errViewLost: the view was lost while a batch was applied; the batch is not
// committed and comes again once the view is rebuilt.
var errViewLost = errors.New("the Redis view was lost while applying: the batch waits for the rebuild")

// Gated wraps a registrations handler: it applies nothing while the view is
// not trusted, and after a batch it advances the view's applied offset of the
// partition. An advance refused because the marker vanished (Redis lost under
// the batch) fails the batch, so it is not committed.
func Gated(rdb redis.UniversalClient, w *view.Watcher, h consume.BatchHandler) consume.BatchHandler {
	return func(ctx context.Context, partition int32, recs []*kgo.Record) error {
		if err := w.Wait(ctx); err != nil {
			return err
		}
		// Everything before this batch must be in the view: a Redis restored
		// from an older snapshot has a gap, and applying past it would hide it.
		applied, err := view.Applied(ctx, rdb, topics.Registrations, partition)
		if err != nil {
			return err
		}
		if first := recs[0].Offset; applied < first {
			reason := fmt.Sprintf("%s/%d applied up to offset %d, the next record is %d", topics.Registrations, partition, applied, first)
			if err := view.Stale(ctx, rdb, "the Redis view is older than the record: "+reason); err != nil {
				return err
			}
			w.Check(ctx)
			return fmt.Errorf("%w: %s", errViewLost, reason)
		}
		last := recs[len(recs)-1].Offset
		recs, err = gateItems(ctx, rdb, w, partition, recs)
		if err != nil {
			return err
		}
		if err := view.Touch(ctx, rdb); err != nil {
			return err
		}
		if len(recs) > 0 {
			if err := h(ctx, partition, recs); err != nil {
				return err
			}
		}
		n, err := view.Advance(ctx, rdb, topics.Registrations, partition, last+1).Int()
		if err != nil {
			return fmt.Errorf("advance the view marker of partition %d: %w", partition, err)
		}
		if n == 0 {
			if _, ok, err := view.Read(ctx, rdb); err == nil && !ok {
				return errViewLost
			}
		}
		return nil
	}
}

// gateItems is Gated's part per item. An item the view does not list yet is
// registered (its marker written) before its first record is applied. The
// records of an item lost on its own node (view/items.go) are not applied
// until it is rebuilt: they are passed over, and the last passed over is
// noted; once the item is rebuilt up to the topic's end then, the partition
// is consumed again from that end (a consume.Rewind, for the records passed
// over after it; every other item's replays are no-ops, guarded by its
// applied offsets), and the item is trusted again.
func gateItems(ctx context.Context, rdb redis.UniversalClient, w *view.Watcher, partition int32, recs []*kgo.Record) ([]*kgo.Record, error) {
	st := w.Status()
	last := map[string]int64{} // item -> its last offset in the batch
	for _, r := range recs {
		last[string(r.Key)] = r.Offset
	}
	if w != nil {
		for it := range last {
			if _, ok := st.Registry[it]; ok || !topics.ValidID(it) {
				continue
			}
			if _, lost := st.Lost[it]; lost {
				continue
			}
			if err := view.Register(ctx, rdb, it, st.Gen); err != nil {
				return nil, err
			}
		}
	}
	// A line lost since the watcher's last check is not written afresh.
	inBatch := make([]string, 0, len(last))
	for it := range last {
		inBatch = append(inBatch, it)
	}
	missing, err := w.Missing(ctx, inBatch)
	if err != nil {
		return nil, err
	}
	if len(st.Lost) == 0 && len(missing) == 0 {
		return recs, nil
	}
	ids := make([]string, 0, len(st.Lost)+len(missing))
	for it := range st.Lost {
		ids = append(ids, it)
	}
	ids = append(ids, missing...)
	lost, skipped, err := view.Lost(ctx, rdb, ids...) // afresh: the rebuild moves them on
	if err != nil {
		return nil, err
	}
	pass := map[string]bool{}
	p := strconv.Itoa(int(partition))
	for it, li := range lost {
		_, inBatch := last[it]
		sk, hasSkip := skipped[it]
		skipHere := hasSkip && sk.Partition == partition
		switch li.State {
		case view.ItemRebuilt:
			if !inBatch && !skipHere {
				continue // another partition's
			}
			end, ok := li.Ends[p]
			if skipHere && ok && sk.Offset >= end && recs[0].Offset > end {
				return nil, &consume.Rewind{Partition: partition, Offset: end}
			}
			if err := view.Found(ctx, rdb, it); err != nil {
				return nil, err
			}
		default: // lost, rebuilding
			if !inBatch {
				continue
			}
			if err := view.Skipped(ctx, rdb, it, partition, last[it]); err != nil {
				return nil, err
			}
			pass[it] = true
		}
	}
	if len(pass) == 0 {
		return recs, nil
	}
	kept := make([]*kgo.Record, 0, len(recs))
	for _, r := range recs {
		if !pass[string(r.Key)] {
			kept = append(kept, r)
		}
	}
	return kept, nil
}

// WaitView wraps a handler so it applies nothing while the view is not
// trusted, nor while an item of the batch is lost on its own node: the batch
// is retried until the item is rebuilt (the items topic is small; a newer
// version applied during the item's rebuild could be overwritten by the
// older one the rebuild read). An item new to the view is registered before
// its first record.
func WaitView(rdb redis.UniversalClient, w *view.Watcher, h consume.BatchHandler) consume.BatchHandler {
	return func(ctx context.Context, partition int32, recs []*kgo.Record) error {
		if err := w.Wait(ctx); err != nil {
			return err
		}
		if w != nil {
			st := w.Status()
			for _, r := range recs {
				it := string(r.Key)
				if _, lost := st.Lost[it]; lost {
					return fmt.Errorf("%w: item %s is being rebuilt", errItemLost, it)
				}
				if _, ok := st.Registry[it]; !ok && topics.ValidID(it) {
					if err := view.Register(ctx, rdb, it, st.Gen); err != nil {
						return err
					}
				}
			}
		}
		return h(ctx, partition, recs)
	}
}

// errItemLost: an item of the batch is lost on its own node; the batch waits
// for its rebuild.
var errItemLost = errors.New("the batch waits for a lost item's rebuild")

// AutoRebuild rebuilds the view whenever the watcher distrusts it and no one
// else is rebuilding (an empty Redis, one older than the record, or a rebuild
// whose rebuilder died), until ctx ends. A rebuild fences the schedulers'
// transactional ids of txnPrefix before it reads the admissions.
func AutoRebuild(ctx context.Context, rdb redis.UniversalClient, w *view.Watcher, rec *view.KafkaRecord, base []kgo.Opt,
	txnPrefix string, reg prometheus.Registerer, log *zap.Logger) error {
	took := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "waitroom_view_rebuild_seconds",
		Help: "Time of one automatic rebuild of the Redis view.", Buckets: prometheus.ExponentialBuckets(0.1, 2, 12)})
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "waitroom_view_rebuilds_total",
		Help: "Automatic rebuilds of the Redis view, by result (ok, error)."}, []string{"result"})
	reg.MustRegister(took, runs)
	rb := rebuild.New(rdb, base, log.Named("rebuild")).WithFence(txnPrefix)
	t := time.NewTicker(w.Interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if st := w.Status(); st.Trusted {
			rebuildItems(ctx, rdb, rb, w, st, runs, took, log)
			continue
		} else if st.Cause == "unchecked" {
			continue
		}
		// Judge afresh: with several consumers, the last verdict may predate
		// another replica's finished rebuild, and acting on it would start
		// the next one (two consumers rebuilt each other's view forever).
		st := w.Check(ctx)
		if st.Trusted || st.Cause == "unchecked" {
			continue
		}
		if st.Cause == "rebuilding" {
			held, err := rdb.Exists(ctx, view.LockKey).Result()
			if err != nil || held == 1 {
				continue // someone is at it
			}
		}
		rep, err := rb.Run(ctx, rebuild.Options{Reason: st.Reason, Settle: 2*w.Interval() + 500*time.Millisecond,
			UnlessReady: st.Cause != "behind"})
		switch {
		case errors.Is(err, rebuild.ErrLocked), errors.Is(err, rebuild.ErrNotNeeded):
			w.Check(ctx)
			continue
		case err != nil:
			runs.WithLabelValues("error").Inc()
			if ctx.Err() == nil {
				log.Error("rebuild the view (trying again)", zap.Error(err))
			}
			continue
		}
		runs.WithLabelValues("ok").Inc()
		took.Observe(rep.Took.Seconds())
		rec.Forget()
		w.Check(ctx)
	}
}

// rebuildItems rebuilds the items of a trusted view lost on their own node
// (view/items.go) that no one is rebuilding: the rest of the view is served
// and applied meanwhile.
func rebuildItems(ctx context.Context, rdb redis.UniversalClient, rb *rebuild.Rebuilder, w *view.Watcher, st view.Status,
	runs *prometheus.CounterVec, took prometheus.Histogram, log *zap.Logger) {
	if n, err := relostStuck(ctx, rdb, st, stuckAfter(w.Interval()), time.Now(), log); err != nil || n > 0 {
		w.Check(ctx) // rebuilt again from the next tick
		return
	}
	var items []string
	var reason string
	held := int64(-1)
	for it, li := range st.Lost {
		if li.State == view.ItemRebuilding {
			if held < 0 {
				n, err := rdb.Exists(ctx, view.LockKey).Result()
				if err != nil {
					return
				}
				held = n
			}
			if held == 1 {
				continue // someone is at it
			}
		}
		if li.State == view.ItemRebuilt {
			continue // the consumer of its partition finishes it
		}
		items = append(items, it)
		reason = li.Reason
	}
	if len(items) == 0 {
		return
	}
	sort.Strings(items)
	rep, err := rb.Run(ctx, rebuild.Options{Items: items, Reason: reason, Settle: 2*w.Interval() + 500*time.Millisecond})
	switch {
	case errors.Is(err, rebuild.ErrLocked):
	case err != nil:
		runs.WithLabelValues("error").Inc()
		if ctx.Err() == nil {
			log.Error("rebuild lost items (trying again)", zap.Strings("items", items), zap.Error(err))
		}
	default:
		runs.WithLabelValues("ok").Inc()
		took.Observe(rep.Took.Seconds())
	}
	w.Check(ctx)
}
