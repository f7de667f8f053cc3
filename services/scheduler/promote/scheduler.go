// Package admission is the scheduler: several replicas run it and share the
// items: each item belongs to one of N shards (a stable hash of its id), each
// shard is a redsync lock, and the replica holding a shard's lock promotes,
// every tick, people from the lines of that shard's items to their admitted
// sets at each item's rate, then publishes what it did to
// waitroom.admissions. A fencing epoch per leadership of a shard keeps a
// paused ex-leader from admitting anyone.
package promote

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kafka/fence"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// EpochKey is the counter every new leader of any shard takes its fencing
// epoch from: one counter for all shards, so an epoch is higher than every
// epoch taken before it whichever shard took it, and the per-item check in
// promote.lua holds even when an item changes shard (another shard count).
const EpochKey = "wr:scheduler:epoch"

// LockName is the redsync mutex of shard 0 of 1; shard i of more has
// ShardLock(i).
const LockName = "wr:scheduler:lock"

// ReplicasKey is a ZSET of the live replicas (member: replica id, score:
// last heartbeat in unix ms): how many share the shards.
const ReplicasKey = "wr:scheduler:replicas"

// ShardLock is the redsync mutex of shard i.
func ShardLock(i, shards int) string {
	if shards <= 1 {
		return LockName
	}
	return LockName + ":" + strconv.Itoa(i)
}

// ShardOf is the shard of item among shards: FNV-1a of its id, so every
// replica agrees without asking anyone.
func ShardOf(item string, shards int) int {
	if shards <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(item))
	return int(h.Sum32() % uint32(shards))
}

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
	// Shards is how many shards the items are divided into (default 8). A
	// replica holds at most ceil(Shards / live replicas) of them, so the
	// work spreads; a dead replica's shards are taken over once their locks
	// expire. Every replica must run with the same count.
	Shards int
	// Describe is what the replica says about itself to the console (its
	// host and admin address); empty: nothing.
	Describe string
	// DrawKey derives the items' draw seeds (pkg/domain/draw.Root): WR_DRAW_KEY.
	// Without it, a pre-queue or random-mode pool is never drawn (logged).
	DrawKey []byte
	// Steer tunes the steering of the items whose policy asks for it.
	Steer SteerOptions
	// TxnPrefix, when set, makes every write of a shard's leader to
	// waitroom.admissions (its epoch claim, admissions, steering) a Kafka
	// transaction under the shard's transactional id fence.ID(TxnPrefix,
	// shard), with clients built from TxnOpts: a new leader of the shard,
	// and a rebuild before it reads the topic, fence whatever an earlier
	// leader still sends (WR_SCHEDULER_TRANSACTIONAL_ID). Empty: the
	// Producer writes them, outside transactions.
	TxnPrefix string
	TxnOpts   []kgo.Opt
	// DrawCheckEvery is how often a tick also looks for due draws (the pools
	// of every item it ticks: two reads an item, about a fifth of a tick's
	// Redis work over 10,000 items); default 1 s, at least the tick. A draw
	// is published at most this long after its window closed.
	DrawCheckEvery time.Duration
}

// Scheduler is one replica.
type Scheduler struct {
	rdb  redis.UniversalClient
	ep   *epochs
	line *queue.Line
	rs   *redsync.Redsync
	prod Producer
	opt  Options
	log  *zap.Logger
	m    *Metrics
	now  func() time.Time
	id   string

	leading  atomic.Uint64 // bit i: leads shard i (Shards <= 64), or any for more
	progress atomic.Int64  // unix ns of the loop's last step (stepped)
	draws    draws
	steer    *steering
	txns     map[int]*fence.Producer // per shard led, with TxnPrefix (the loop's alone)

	hookPublish func() // tests: runs right before a confirmed tick publishes
}

// Leading reports whether this replica leads any shard right now.
func (s *Scheduler) Leading() bool { return s.leading.Load() != 0 }

// Leads reports whether this replica leads item's shard right now.
func (s *Scheduler) Leads(item string) bool {
	return s.leading.Load()&(1<<uint(ShardOf(item, s.opt.Shards)%64)) != 0
}

// ID is this replica's name among the live replicas.
func (s *Scheduler) ID() string { return s.id }

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
	if opt.DrawCheckEvery <= 0 {
		opt.DrawCheckEvery = time.Second
	}
	opt.DrawCheckEvery = max(opt.DrawCheckEvery, opt.Tick)
	if opt.Clock == nil {
		opt.Clock = time.Now
	}
	if opt.Shards <= 0 {
		opt.Shards = 8
	}
	opt.Shards = min(opt.Shards, 64) // Leads keeps one bit per shard
	opt.Steer = opt.Steer.withDefaults(opt.Tick)
	var b [8]byte
	_, _ = rand.Read(b[:])
	m := NewMetrics(reg)
	m.shards.Set(float64(opt.Shards))
	return &Scheduler{
		rdb: rdb, ep: &epochs{rdb: rdb}, line: queue.New(rdb), rs: redsync.New(goredis.NewPool(rdb)), prod: prod,
		opt: opt, log: log, m: m, now: opt.Clock, id: hex.EncodeToString(b[:]),
		steer: newSteering(rdb, opt.Steer, reg), txns: map[int]*fence.Producer{},
	}
}

// Run takes a fair share of the shards and ticks the items of the shards it
// leads, until ctx ends; then it releases its shards (unless
// KeepLockOnStop).
func (s *Scheduler) Run(ctx context.Context) error {
	t := time.NewTicker(s.opt.Tick)
	defer t.Stop()
	held := map[int]*lease{}
	defer s.stop(ctx, held)
	for {
		s.stepped()
		s.share(ctx, held)
		if len(held) > 0 {
			s.tickLeases(ctx, held)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// stop ends every leadership: the locks are released and the replica leaves
// the live set, so the others take its shards at once. KeepLockOnStop (a
// crash) leaves both to expire.
func (s *Scheduler) stop(ctx context.Context, held map[int]*lease) {
	if s.opt.KeepLockOnStop {
		for sh := range held {
			s.drop(ctx, held, sh, false)
		}
		return
	}
	for sh := range held {
		s.drop(ctx, held, sh, true)
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := s.rdb.ZRem(uctx, ReplicasKey, s.id).Err(); err != nil {
		s.log.Warn("leave the live replicas", zap.Error(err))
	}
}

// share keeps this replica's share of the shards: it says it is alive,
// drops the locks it lost (each lease extends its own: keep), gives back
// what is above its share, and tries free shards while under it.
func (s *Scheduler) share(ctx context.Context, held map[int]*lease) {
	live := s.heartbeat(ctx)
	for sh, l := range held {
		if err := l.lostErr(); err != nil {
			s.log.Warn("lost a shard's lock", zap.Int("shard", sh), zap.Int64("epoch", l.epoch), zap.Error(err))
			s.drop(ctx, held, sh, false)
		}
	}
	if ctx.Err() != nil {
		return
	}
	fair := (s.opt.Shards + live - 1) / live
	for len(held) > fair {
		sh := -1
		for k := range held {
			sh = max(sh, k)
		}
		s.log.Info("handing a shard over", zap.Int("shard", sh), zap.Int("live", live), zap.Int("fair", fair))
		s.drop(ctx, held, sh, true)
	}
	if len(held) >= fair || !s.trusted() {
		return // the epoch counter may be lost with the view: lead after the rebuild
	}
	start := ShardOf(s.id, s.opt.Shards) // replicas start their tries apart
	for k := 0; k < s.opt.Shards && len(held) < fair; k++ {
		sh := (start + k) % s.opt.Shards
		if held[sh] != nil {
			continue
		}
		if l := s.acquire(ctx, sh); l != nil {
			held[sh] = l
			s.mark(held)
		}
	}
}

// heartbeat records this replica as alive, forgets replicas silent for a
// lock expiry, and returns how many are alive (at least 1: itself).
func (s *Scheduler) heartbeat(ctx context.Context) int {
	now := time.Now().UnixMilli()
	var n *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, ReplicasKey, redis.Z{Score: float64(now), Member: s.id})
		s.describe(ctx, p)
		p.ZRemRangeByScore(ctx, ReplicasKey, "-inf", "("+strconv.FormatInt(now-s.opt.LockExpiry.Milliseconds(), 10))
		n = p.ZCard(ctx, ReplicasKey)
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("heartbeat", zap.Error(err))
		}
		return 1 // alone as far as we know: take what is free
	}
	return max(1, int(n.Val()))
}

// acquire tries shard sh's lock; on success it takes a fencing epoch and
// claims it on waitroom.admissions before anything is promoted with it. The
// lock is extended from the moment it is taken (hold): the claim is a Kafka
// produce, and a replica taking several shards in one pass would otherwise
// see the first one's lock run out before its first tick.
func (s *Scheduler) acquire(ctx context.Context, sh int) *lease {
	s.stepped()
	mu := s.rs.NewMutex(ShardLock(sh, s.opt.Shards), redsync.WithExpiry(s.opt.LockExpiry), redsync.WithTries(1),
		redsync.WithGenValueFunc(s.lockValue))
	if err := mu.TryLockContext(ctx); err != nil {
		if !isTaken(err) && ctx.Err() == nil {
			s.log.Warn("try a shard's lock", zap.Int("shard", sh), zap.Error(err))
		}
		return nil
	}
	l := s.hold(ctx, sh, mu)
	out, err := s.output(ctx, sh)
	if err == nil {
		l.epoch, err = s.ep.next(ctx)
	}
	if err == nil {
		err = s.claim(ctx, out, l.epoch)
	}
	if err == nil {
		err = l.lostErr()
	}
	if err != nil {
		s.log.Warn("not leading the shard", zap.Int("shard", sh), zap.Error(err))
		s.closeOutput(sh)
		l.release()
		s.unlock(ctx, mu)
		return nil
	}
	s.log.Info("leading", zap.Int("shard", sh), zap.Int("shards", s.opt.Shards), zap.Int64("epoch", l.epoch), zap.Time("lockUntil", l.Until()))
	s.m.epoch.Set(float64(l.epoch))
	return l
}

// drop ends the leadership of shard sh, releasing its lock when release.
func (s *Scheduler) drop(ctx context.Context, held map[int]*lease, sh int, release bool) {
	l := held[sh]
	delete(held, sh)
	s.mark(held)
	s.closeOutput(sh)
	if l == nil {
		return
	}
	s.steer.leave(l.epoch)
	l.release()
	if release {
		s.unlock(ctx, l.mu)
	}
}

func (s *Scheduler) unlock(ctx context.Context, mu *redsync.Mutex) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if _, err := mu.UnlockContext(uctx); err != nil {
		s.log.Warn("release a shard's lock", zap.Error(err))
	}
}

// mark publishes which shards are led (Leading, Leads, the gauge).
func (s *Scheduler) mark(held map[int]*lease) {
	var bits uint64
	for sh := range held {
		bits |= 1 << uint(sh%64)
	}
	s.leading.Store(bits)
	s.m.leader.Set(float64(len(held)))
	if len(held) == 0 {
		s.m.perItem.reset() // a replica that leads nothing shows no item's tick
	}
}

// tickLeases runs one tick over the active items of the shards held, shard
// by shard, each with its own epoch; a shard whose lock ran out or whose
// epoch was fenced is dropped.
func (s *Scheduler) tickLeases(ctx context.Context, held map[int]*lease) {
	began := time.Now()
	if !s.trusted() {
		s.m.viewSkipped.Inc()
		return // admit nobody from a view that cannot be trusted
	}
	items, err := s.activeItems(ctx)
	if err != nil {
		s.log.Warn("read active items", zap.Error(err))
		return // Redis trouble: try again next tick, still leading
	}
	if !s.confirmed(ctx) {
		return
	}
	mine := make(map[int][]string, len(held))
	n := 0
	for _, it := range items {
		if sh := ShardOf(it, s.opt.Shards); held[sh] != nil {
			mine[sh] = append(mine[sh], it)
			n++
		}
	}
	if n == 0 {
		s.m.perItem.reset() // none of the items is this replica's
		s.m.items.Set(0)
		return
	}
	now := s.now() // one line time for the whole tick, read only when there is work
	// The per-item gauges are this replica's items of this tick: what its
	// shards no longer hold is swept once every shard has ticked.
	seen := make(map[string]bool, n)
	defer s.m.perItem.sweep(seen)
	draws := s.draws.checkDue(now, s.opt.DrawCheckEvery)
	for sh, l := range held {
		if len(mine[sh]) == 0 {
			continue
		}
		shardBegan := time.Now()
		s.stepped()
		err := s.tickItems(ctx, s.shardOutput(sh), l.epoch, l, mine[sh], now, seen, draws)
		s.m.shardTick.Observe(time.Since(shardBegan).Seconds())
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("stepping down from a shard", zap.Int("shard", sh), zap.Int64("epoch", l.epoch), zap.Error(err))
			}
			// Released (when still ours), so a fenced shard, e.g. after a
			// rebuild raised every item's epoch, is led again on the next tick
			// with a new epoch instead of waiting for the lock to expire.
			s.drop(ctx, held, sh, ctx.Err() == nil)
		}
	}
	s.m.tick.Observe(time.Since(began).Seconds())
	s.m.items.Set(float64(n))
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

// errStepDown ends a leadership: the lock ran out or a newer epoch fenced us.
var errStepDown = errors.New("no longer the leader")

// tick promotes every active item once under one lock and epoch (one
// leader of everything) and publishes what changed.
func (s *Scheduler) tick(ctx context.Context, epoch int64, mu deadline) error {
	if !time.Now().Before(mu.Until()) {
		return fmt.Errorf("%w: the lock expired at %s", errStepDown, mu.Until().Format(time.RFC3339Nano))
	}
	if !s.trusted() {
		s.m.viewSkipped.Inc()
		return nil // admit nobody from a view that cannot be trusted
	}
	items, err := s.activeItems(ctx)
	if err != nil {
		s.log.Warn("read active items", zap.Error(err))
		return nil // Redis trouble: try again next tick, still leading
	}
	if !s.confirmed(ctx) {
		return nil
	}
	seen := make(map[string]bool, len(items))
	now := s.now()
	err = s.tickItems(ctx, s.prod, epoch, mu, items, now, seen, s.draws.checkDue(now, s.opt.DrawCheckEvery))
	s.m.perItem.sweep(seen)
	return err
}

// tickItems promotes items once under mu and epoch and publishes what
// changed on out (and, with draws, publishes the items' due draws first);
// errStepDown when the lock ran out or an item fenced the epoch.
func (s *Scheduler) tickItems(ctx context.Context, out Producer, epoch int64, mu deadline, items []string, start time.Time, seen map[string]bool, draws bool) error {
	if !time.Now().Before(mu.Until()) {
		return fmt.Errorf("%w: the lock expired at %s", errStepDown, mu.Until().Format(time.RFC3339Nano))
	}
	// A transactional out takes its producer epoch (again, after a failed
	// transaction) before the view is confirmed below: a rebuild that
	// starts after the confirmation fences this epoch before it reads the
	// admissions, so the tick's publish is either read by it or refused.
	canPublish := s.outputReady(ctx, out)
	// An item whose node lost its keys admits nobody until it is rebuilt:
	// its line in Redis is empty or behind, not the line.
	items = s.opt.View.Usable(items)
	var due []dueItem
	steerNow := s.steer.due(epoch, start)
	var ticked map[string]queue.Tick
	if steerNow {
		ticked = make(map[string]queue.Tick, len(items))
	}
	for lo := 0; lo < len(items); lo += s.opt.BatchItems {
		batch := items[lo:min(lo+s.opt.BatchItems, len(items))]
		// Nor one lost since the watcher's last check: read its marker first.
		if missing, err := s.opt.View.Missing(ctx, batch); err != nil {
			s.log.Warn("read the items' markers", zap.Error(err))
			return nil // Redis trouble: try again next tick, still leading
		} else if len(missing) > 0 {
			batch = slices.DeleteFunc(slices.Clone(batch), func(it string) bool { return slices.Contains(missing, it) })
		}
		if draws {
			s.drawDue(ctx, batch, start)
		}
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
			s.steer.count(batch[i], tk.Admitted)
			if ticked != nil {
				ticked[batch[i]] = tk
			}
			if len(tk.Unpublished) == 0 && tk.Expired == 0 {
				continue
			}
			due = append(due, dueItem{item: batch[i], tk: tk})
		}
	}
	// Confirmed again after the promotes: the view may have changed since
	// the tick's confirmation (a rebuild started, or a failover the client
	// followed and retried the promote on a replica that missed the last
	// tick). What was promoted then is not published: it stays unpublished
	// in Redis, published by the next tick of a view still trusted, or lost
	// with the view, whose rebuild from the record returns those people to
	// their places.
	if len(due) > 0 && canPublish && s.stillConfirmed(ctx) {
		s.beforePublish()
		s.publish(ctx, out, epoch, start, due)
	}
	if steerNow && canPublish {
		s.steerItems(ctx, out, epoch, slices.Collect(maps.Keys(ticked)), ticked, start)
	}
	// Counted after the tick's writes too: a Redis restored to before them
	// (a failover to a replica that missed them) has a lower count, and the
	// next tick's confirmation refuses it instead of admitting again.
	if err := s.touch(ctx); err != nil {
		s.log.Warn("count the tick on the view marker", zap.Error(err))
	}
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
func (s *Scheduler) publish(ctx context.Context, out Producer, epoch int64, at time.Time, items []dueItem) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	event := func(d dueItem, page []queue.Admit) []topics.AdmissionEvent {
		return admissionEvents(topics.AdmissionEvent{V: topics.Version, ItemID: d.item,
			Head: d.tk.Head, Waiting: d.tk.Waiting, Active: d.tk.Active, Epoch: epoch, At: at.UnixMilli()}, page, s.opt.MaxEventBytes)
	}
	parts := make([][]topics.AdmissionEvent, len(items)) // per item: its events still to send, in order
	sent := make([]int64, len(items))                    // per item: tokenIds sent and acknowledged
	for i, d := range items {
		parts[i] = event(d, d.tk.Admits)
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
		res := out.ProduceSync(pctx, recs...)
		for _, r := range res {
			if r.Err != nil {
				failed[r.Record] = r.Err
			}
		}
		if err := s.advance(pctx, out, res); err != nil {
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
		s.nextPages(pctx, items, parts, event)
	}
}

// nextPages reads the next page of unpublished admissions of each item whose
// events were all sent and acknowledged while it has more (an empty, non-nil
// parts[i]), and makes its events; an item with no more, or whose page
// cannot be read, is done (nil) until the next tick.
func (s *Scheduler) nextPages(ctx context.Context, items []dueItem, parts [][]topics.AdmissionEvent,
	event func(dueItem, []queue.Admit) []topics.AdmissionEvent) {
	for i, d := range items {
		if parts[i] == nil || len(parts[i]) > 0 {
			continue
		}
		page, err := s.line.AdmitPage(ctx, d.item, queue.UnpublishedPage)
		if err != nil {
			s.log.Warn("read unpublished admissions; they go out with the next tick", zap.String("item", d.item), zap.Error(err))
		}
		parts[i] = nil
		if len(page) > 0 {
			parts[i] = event(d, page)
		}
	}
}

// admissionEvents are the events of page, admissions as promote wrote them,
// on the envelope ev: one run of events per decision point (admissions of
// one tick carry the same applied offsets; a page may span several ticks
// whose events were not acknowledged), each cut to maxBytes. An admission
// written before its expiry was kept with it makes its run go without
// expiries (a rebuild then counts the session TTL from the event's time).
func admissionEvents(ev topics.AdmissionEvent, page []queue.Admit, maxBytes int) []topics.AdmissionEvent {
	if len(page) == 0 {
		return topics.SplitAdmission(ev, maxBytes)
	}
	var out []topics.AdmissionEvent
	for lo := 0; lo < len(page); {
		hi := lo + 1
		for hi < len(page) && maps.Equal(page[hi].Applied, page[lo].Applied) {
			hi++
		}
		run := ev
		run.Applied = page[lo].Applied
		run.Admitted, run.ExpiresAt = make([]string, 0, hi-lo), make([]int64, 0, hi-lo)
		for _, a := range page[lo:hi] {
			run.Admitted = append(run.Admitted, a.Token)
			if a.ExpiresAt <= 0 {
				run.ExpiresAt = nil
			} else if run.ExpiresAt != nil {
				run.ExpiresAt = append(run.ExpiresAt, a.ExpiresAt)
			}
		}
		if len(run.ExpiresAt) != len(run.Admitted) {
			run.ExpiresAt = nil
		}
		out = append(out, topics.SplitAdmission(run, maxBytes)...)
		lo = hi
	}
	return out
}

// Metrics of the scheduler.
type Metrics struct {
	leader, shards            prometheus.Gauge
	epoch, items              prometheus.Gauge
	tick, shardTick           prometheus.Histogram
	admitted, expired, fenced prometheus.Counter
	publishErrors             prometheus.Counter
	viewSkipped               prometheus.Counter
	perItem                   *itemMetrics
	draws, drawErrors         prometheus.Counter
}

// NewMetrics registers the scheduler's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "waitroom_scheduler_leader", Help: "Shards this replica leads (holds the lock of)."}),
		shards: prometheus.NewGauge(prometheus.GaugeOpts{Name: "waitroom_scheduler_shards",
			Help: "Shards the items are divided into (WR_SCHEDULER_SHARDS): the replicas' waitroom_scheduler_leader sum to it when every shard is led."}),
		epoch: prometheus.NewGauge(prometheus.GaugeOpts{Name: "waitroom_scheduler_epoch", Help: "Fencing epoch of this replica's last leadership of a shard."}),
		items: prometheus.NewGauge(prometheus.GaugeOpts{Name: "waitroom_scheduler_active_items", Help: "Items of this replica's shards promoted in the last tick."}),
		tick: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "waitroom_scheduler_tick_duration_seconds", Help: "Time of one tick over the active items of this replica's shards.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5}}),
		admitted:      prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_scheduler_admitted_total", Help: "People admitted."}),
		expired:       prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_scheduler_expired_total", Help: "Admissions whose session ran out."}),
		fenced:        prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_scheduler_fenced_total", Help: "Ticks refused because a newer leader owns an item."}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_scheduler_publish_errors_total", Help: "Ticks whose admission events Kafka did not take."}),
	}
	m.shardTick = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "waitroom_scheduler_shard_tick_duration_seconds",
		Help: "Time of one shard's part of a tick (its items' promotes and events).", Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5}})
	reg.MustRegister(m.shardTick)
	m.viewSkipped = prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_scheduler_view_skipped_ticks_total", Help: "Ticks that admitted nobody because the Redis view was not trusted (being rebuilt)."})
	reg.MustRegister(m.viewSkipped)
	reg.MustRegister(m.leader, m.shards, m.epoch, m.items, m.tick, m.admitted, m.expired, m.fenced, m.publishErrors)
	m.draws = prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_scheduler_draws_total", Help: "Draw records published (pre-queue and random-mode windows)."})
	m.drawErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_scheduler_draw_errors_total", Help: "Draws that could not be made or published (no key, no commitment, chain used up, Kafka)."})
	reg.MustRegister(m.draws, m.drawErrors)
	m.perItem = newItemMetrics(reg)
	return m
}
