package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/consume"
	"github.com/waitroom/waitroom/pkg/rebuild"
	"github.com/waitroom/waitroom/pkg/view"
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
		if err := view.Touch(ctx, rdb); err != nil {
			return err
		}
		if err := h(ctx, partition, recs); err != nil {
			return err
		}
		n, err := view.Advance(ctx, rdb, topics.Registrations, partition, recs[len(recs)-1].Offset+1).Int()
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

// WaitView wraps a handler so it applies nothing while the view is not trusted.
func WaitView(w *view.Watcher, h consume.BatchHandler) consume.BatchHandler {
	return func(ctx context.Context, partition int32, recs []*kgo.Record) error {
		if err := w.Wait(ctx); err != nil {
			return err
		}
		return h(ctx, partition, recs)
	}
}

// AutoRebuild rebuilds the view whenever the watcher distrusts it and no one
// else is rebuilding (an empty Redis, one older than the record, or a rebuild
// whose rebuilder died), until ctx ends.
func AutoRebuild(ctx context.Context, rdb redis.UniversalClient, w *view.Watcher, rec *view.KafkaRecord, base []kgo.Opt,
	reg prometheus.Registerer, log *zap.Logger) error {
	took := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "waitroom_view_rebuild_seconds",
		Help: "Time of one automatic rebuild of the Redis view.", Buckets: prometheus.ExponentialBuckets(0.1, 2, 12)})
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "waitroom_view_rebuilds_total",
		Help: "Automatic rebuilds of the Redis view, by result (ok, error)."}, []string{"result"})
	reg.MustRegister(took, runs)
	rb := rebuild.New(rdb, base, log.Named("rebuild"))
	t := time.NewTicker(w.Interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if st := w.Status(); st.Trusted || st.Cause == "unchecked" {
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
