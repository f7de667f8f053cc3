// Package admission is the scheduler: several replicas run it, one of them
// holds a redsync lock and, every tick, promotes people from each active
// item's line to its admitted set at the item's rate, then publishes what it
// did to waitroom.admissions. A fencing epoch keeps a paused ex-leader from
// admitting anyone.
package admission

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/queue"
	"github.com/waitroom/waitroom/pkg/view"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// EpochKey is the counter every new leader takes its fencing epoch from.
const EpochKey = "wr:scheduler:epoch"

// LockName is the redsync mutex the replicas compete for.
const LockName = "wr:scheduler:lock"

// Producer publishes admission events (*kgo.Client).
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// Options tune a Scheduler.
type Options struct {
	// Tick is how often the leader promotes (default 200 ms).
	Tick time.Duration
	// LockExpiry is how long the lock outlives a leader that stopped extending
	// it: the longest gap when a leader dies (default 2 s, at least 3 ticks).
	LockExpiry time.Duration
	// Burst is how much unused rate an item's budget may hold (default 1 s).
	Burst time.Duration
	// BatchItems bounds the items promoted in one pipelined round (default 500).
	BatchItems int
	// KeepLockOnStop leaves the lock to expire instead of releasing it when Run
	// returns: a crashed process does that, and fault tests need to.
	KeepLockOnStop bool
	// MaxEventBytes bounds the encoded size of one admission event: a tick's
	// admissions that would not fit go out as several events, in order
	// (default topics.MaxAdmissionEventBytes, under Kafka's 1 MB default).
	MaxEventBytes int
	// Clock is the time the line runs on: the rate budget's refill and session
	// expiries (default time.Now). The lock always runs on real time. Tests
	// inject one so a rate plays out without waiting for it in real time.
	Clock func() time.Time
	// View, when set, gates leading and every tick on a trusted Redis view.
	View *view.Watcher
}

// Scheduler is one replica.
type Scheduler struct {
	rdb  redis.UniversalClient
	line *queue.Line
	rs   *redsync.Redsync
	prod Producer
	opt  Options
	log  *zap.Logger
	m    *Metrics
	now  func() time.Time

	leading atomic.Bool
}

// Leading reports whether this replica holds the lock right now.
func (s *Scheduler) Leading() bool { return s.leading.Load() }

// New returns a replica; metrics are registered on reg.
func New(rdb redis.UniversalClient, prod Producer, opt Options, reg prometheus.Registerer, log *zap.Logger) *Scheduler {
	if opt.Tick <= 0 {
		opt.Tick = 200 * time.Millisecond
	}
	if opt.LockExpiry <= 0 {
		opt.LockExpiry = 2 * time.Second
	}
	opt.LockExpiry = max(opt.LockExpiry, 3*opt.Tick)
	if opt.Burst <= 0 {
		opt.Burst = time.Second
	}
	if opt.BatchItems <= 0 {
		opt.BatchItems = 500
	}
	if opt.MaxEventBytes <= 0 {
		opt.MaxEventBytes = topics.MaxAdmissionEventBytes
	}
	if opt.Clock == nil {
		opt.Clock = time.Now
	}
	return &Scheduler{
		rdb: rdb, line: queue.New(rdb), rs: redsync.New(goredis.NewPool(rdb)), prod: prod,
		opt: opt, log: log, m: NewMetrics(reg), now: opt.Clock,
	}
}

// Run competes for leadership and, while leading, ticks, until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	t := time.NewTicker(s.opt.Tick)
	defer t.Stop()
	for {
		mu := s.rs.NewMutex(LockName, redsync.WithExpiry(s.opt.LockExpiry), redsync.WithTries(1))
		if err := mu.TryLockContext(ctx); err == nil {
			s.lead(ctx, mu)
		} else if !isTaken(err) && ctx.Err() == nil {
			s.log.Warn("try the scheduler lock", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// isTaken reports the ordinary "another replica leads" answer. redsync
// returns its taken errors as pointers (and may join them); match both forms.
func isTaken(err error) bool {
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	var takenV redsync.ErrTaken
	var nodeTakenV redsync.ErrNodeTaken
	return errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || errors.As(err, &nodeTaken) ||
		errors.As(err, &takenV) || errors.As(err, &nodeTakenV)
}

// lead ticks while this replica holds the lock; it returns when the lock is
// lost, another leader fenced it, or ctx ends (then it releases the lock).
func (s *Scheduler) lead(ctx context.Context, mu *redsync.Mutex) {
	if !s.trusted() {
		return // the epoch counter may be lost with the view: lead after the rebuild
	}
	epoch, err := s.rdb.Incr(ctx, EpochKey).Result()
	if err != nil {
		s.log.Warn("take a fencing epoch", zap.Error(err))
		return
	}
	if err := s.claim(ctx, epoch); err != nil {
		s.log.Warn("stepping down", zap.Error(err))
		return
	}
	s.log.Info("leading", zap.Int64("epoch", epoch), zap.Time("lockUntil", mu.Until()))
	s.m.leader.Set(1)
	s.m.epoch.Set(float64(epoch))
	s.leading.Store(true)
	defer s.m.leader.Set(0)
	defer s.m.perItem.reset()
	defer s.leading.Store(false)
	defer func() {
		if s.opt.KeepLockOnStop {
			return
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if _, err := mu.UnlockContext(uctx); err != nil {
			s.log.Warn("release the scheduler lock", zap.Error(err))
		}
	}()

	t := time.NewTicker(s.opt.Tick)
	defer t.Stop()
	for {
		if err := s.tick(ctx, epoch, mu); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("stepping down", zap.Int64("epoch", epoch), zap.Error(err))
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ok, err := mu.ExtendContext(ctx); !ok || err != nil {
			if ctx.Err() == nil {
				s.log.Warn("lost the scheduler lock", zap.Int64("epoch", epoch), zap.Error(err))
			}
			return
		}
	}
}

// errStepDown ends a leadership: the lock ran out or a newer epoch fenced us.
var errStepDown = errors.New("no longer the leader")

// tick promotes every active item once and publishes what changed.
func (s *Scheduler) tick(ctx context.Context, epoch int64, mu *redsync.Mutex) error {
	began := time.Now()
	if !began.Before(mu.Until()) {
		return fmt.Errorf("%w: the lock expired at %s", errStepDown, mu.Until().Format(time.RFC3339Nano))
	}
	if !s.trusted() {
		s.m.viewSkipped.Inc()
		return nil // admit nobody from a view that cannot be trusted
	}
	items, err := s.line.ActiveItems(ctx)
	if err != nil {
		s.log.Warn("read active items", zap.Error(err))
		return nil // Redis trouble: try again next tick, still leading
	}
	if err := view.Touch(ctx, s.rdb); err != nil {
		s.log.Warn("count the tick on the view marker", zap.Error(err))
		return nil
	}
	start := s.now()
	var due []dueItem
	seen := make(map[string]bool, len(items))
	for lo := 0; lo < len(items); lo += s.opt.BatchItems {
		batch := items[lo:min(lo+s.opt.BatchItems, len(items))]
		ticks, errs, err := s.line.PromoteMany(ctx, batch, epoch, start, s.opt.Burst)
		if err != nil {
			s.log.Warn("promote", zap.Int("items", len(batch)), zap.Error(err))
			return nil
		}
		for i, tk := range ticks {
			switch {
			case errors.Is(errs[i], queue.ErrFenced):
				s.m.fenced.Inc()
				return fmt.Errorf("%w: item %s has a newer epoch than %d", errStepDown, batch[i], epoch)
			case errs[i] != nil:
				s.log.Warn("promote item", zap.String("item", batch[i]), zap.Error(errs[i]))
				continue
			}
			s.m.admitted.Add(float64(tk.Admitted))
			s.m.expired.Add(float64(tk.Expired))
			s.m.perItem.observe(batch[i], tk.Admitted, tk.Waiting, tk.Active, seen)
			if len(tk.Unpublished) == 0 && tk.Expired == 0 {
				continue
			}
			due = append(due, dueItem{item: batch[i], tk: tk})
		}
	}
	if len(due) > 0 {
		s.publish(ctx, epoch, start, due)
	}
	s.m.tick.Observe(time.Since(began).Seconds())
	s.m.items.Set(float64(len(items)))
	s.m.perItem.sweep(seen)
	return nil
}

// dueItem is an item whose tick has something to publish.
type dueItem struct {
	item string
	tk   queue.Tick
}

// publish puts the tick's events on Kafka and then forgets the published
// tokenIds in Redis. A tick's admissions go out as events of at most
// MaxEventBytes each, and an item with more unpublished tokenIds than one page
// goes on page by page. Each round of produce sends the next event of every
// item and acknowledges those that went out; an item whose event failed stops
// there, and the rest of it is left to the next tick (or the next leader). So
// every admission reaches the topic at least once, and in line order.
// Publishing outlives a cancelled ctx for a moment, so a graceful stop loses
// nothing.
func (s *Scheduler) publish(ctx context.Context, epoch int64, at time.Time, items []dueItem) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	event := func(d dueItem, page []string) []topics.AdmissionEvent {
		return topics.SplitAdmission(topics.AdmissionEvent{V: topics.Version, ItemID: d.item, Admitted: page, ExpiresAt: s.expiries(pctx, d.item, page),
			Head: d.tk.Head, Waiting: d.tk.Waiting, Active: d.tk.Active, Epoch: epoch, At: at.UnixMilli()}, s.opt.MaxEventBytes)
	}
	parts := make([][]topics.AdmissionEvent, len(items)) // per item: its events still to send, in order
	sent := make([]int64, len(items))                    // per item: tokenIds sent and acknowledged
	for i, d := range items {
		parts[i] = event(d, d.tk.Unpublished)
	}
	for {
		var recs []*kgo.Record
		var owner []int
		for i, d := range items {
			if len(parts[i]) > 0 {
				recs = append(recs, &kgo.Record{Topic: topics.Admissions, Key: []byte(d.item), Value: topics.Encode(&parts[i][0])})
				owner = append(owner, i)
			}
		}
		if len(recs) == 0 {
			return
		}
		failed := map[*kgo.Record]error{}
		res := s.prod.ProduceSync(pctx, recs...)
		for _, r := range res {
			if r.Err != nil {
				failed[r.Record] = r.Err
			}
		}
		if err := s.advance(pctx, res); err != nil {
			s.log.Warn("advance the view marker past the published admissions", zap.Error(err))
		}
		var ackItems []string
		var ackCounts []int
		var firstErr error
		for j, r := range recs {
			i := owner[j]
			if err, bad := failed[r]; bad {
				firstErr = cmp.Or(firstErr, err)
				parts[i] = nil // this item stops at its first failed event
				continue
			}
			if n := len(parts[i][0].Admitted); n > 0 {
				ackItems, ackCounts = append(ackItems, items[i].item), append(ackCounts, n)
				sent[i] += int64(n)
			}
			parts[i] = parts[i][1:]
			if len(parts[i]) == 0 {
				parts[i] = nil // done, unless a next page is to be read once this one is acknowledged
				if sent[i] > 0 && sent[i] < items[i].tk.UnpublishedTotal {
					parts[i] = []topics.AdmissionEvent{}
				}
			}
		}
		if firstErr != nil {
			s.m.publishErrors.Inc()
			s.log.Warn("publish admission events; the rest go out with the next tick", zap.Int("events", len(recs)),
				zap.Int("failed", len(failed)), zap.Error(firstErr))
		}
		if len(ackItems) > 0 {
			if err := s.line.AckPublished(pctx, epoch, ackItems, ackCounts); err != nil {
				s.log.Warn("acknowledge published admissions; they will be published again", zap.Error(err))
				return
			}
		}
		for i, d := range items {
			if parts[i] == nil || len(parts[i]) > 0 {
				continue
			}
			page, err := s.line.Unpublished(pctx, d.item, queue.UnpublishedPage)
			if err != nil {
				s.log.Warn("read unpublished admissions; they go out with the next tick", zap.String("item", d.item), zap.Error(err))
			}
			parts[i] = nil
			if len(page) > 0 {
				parts[i] = event(d, page)
			}
		}
	}
}

// Metrics of the scheduler.
type Metrics struct {
	leader, epoch, items      prometheus.Gauge
	tick                      prometheus.Histogram
	admitted, expired, fenced prometheus.Counter
	publishErrors             prometheus.Counter
	viewSkipped               prometheus.Counter
	perItem                   *itemMetrics
}

// NewMetrics registers the scheduler's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "waitroom_scheduler_leader", Help: "1 while this replica holds the scheduler lock."}),
		epoch:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "waitroom_scheduler_epoch", Help: "Fencing epoch of this replica's last leadership."}),
		items:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "waitroom_scheduler_active_items", Help: "Items promoted in the last tick."}),
		tick: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "waitroom_scheduler_tick_duration_seconds", Help: "Time of one tick over every active item.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5}}),
		admitted:      prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_scheduler_admitted_total", Help: "People admitted."}),
		expired:       prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_scheduler_expired_total", Help: "Admissions whose session ran out."}),
		fenced:        prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_scheduler_fenced_total", Help: "Ticks refused because a newer leader owns an item."}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_scheduler_publish_errors_total", Help: "Ticks whose admission events Kafka did not take."}),
	}
	m.viewSkipped = prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_scheduler_view_skipped_ticks_total", Help: "Ticks that admitted nobody because the Redis view was not trusted (being rebuilt)."})
	reg.MustRegister(m.viewSkipped)
	reg.MustRegister(m.leader, m.epoch, m.items, m.tick, m.admitted, m.expired, m.fenced, m.publishErrors)
	m.perItem = newItemMetrics(reg)
	return m
}
