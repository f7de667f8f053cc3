// Package rebuild rebuilds the Redis view from the record: it replays
// waitroom.items, waitroom.registrations and waitroom.admissions through the
// same Lua scripts the consumer and the scheduler run (pkg/store/queue), each
// admission right after the registrations it was decided after, so every
// item's line is the one the services built; then it fences every item above
// every epoch used.
package rebuild

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/retry"
	"github.com/waitroom/waitroom/pkg/kafka/fence"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// EpochKey is the scheduler's epoch counter (promote.EpochKey).
const EpochKey = "wr:scheduler:epoch"

// ErrNotNeeded: with Options.UnlessReady, the view was ready by the time the
// lock was held (someone else rebuilt it).
var ErrNotNeeded = errors.New("the view is ready: no rebuild needed")

// ErrLocked: another process is rebuilding the view.
var ErrLocked = errors.New("another rebuild holds " + view.LockKey)

// Options of a rebuild.
type Options struct {
	// Reason is written on the marker while rebuilding (shown by /readyz).
	Reason string
	// Settle is how long to wait after marking the view rebuilding before
	// writing, so every service has seen it and stopped writing (default 1 s;
	// at least two watcher check intervals).
	Settle time.Duration
	// LockTTL is how long the rebuild lock outlives a crashed rebuilder
	// (default 30 s; renewed while working).
	LockTTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// UnlessReady skips the rebuild (ErrNotNeeded) when, once the lock is
	// held, the marker says the view is ready: another replica finished a
	// rebuild between this one's verdict and its lock. Leave it off when a
	// ready view is the problem (older than the record, rolled back).
	UnlessReady bool
	// Items, when set, rebuilds only these items (lost on their own node
	// while the view is trusted) and leaves the view's marker and every
	// other item alone (items.go).
	Items []string
	// Progress is how often a per-item rebuild writes on the lost items how
	// many records it has left (default 1 s).
	Progress time.Duration
	// FullReplay replays the whole record even where waitroom.snapshots
	// holds a complete snapshot of a line (a check, or a benchmark).
	FullReplay bool
}

// Report says what a rebuild did.
type Report struct {
	Gen      string
	Records  int64 // records replayed over the three topics
	Items    int
	Waiting  int
	Admitted int
	Epoch    int64 // the epoch every item is fenced at now
	Took     time.Duration
	// ReadTook is the replay (reading the topics and applying them);
	// WriteTook the settling of every line after it (expiries, pace, fence).
	ReadTook  time.Duration
	WriteTook time.Duration
	// FenceTook is the part of ReadTook spent fencing the schedulers'
	// transactional ids (an open transaction is aborted first).
	FenceTook time.Duration
	// Snapshots is how many lines were loaded from a snapshot (their
	// records before it were not read); Torn names lines whose latest
	// snapshot was incomplete (replayed from the start instead).
	Snapshots int
	Torn      []string
}

// Rebuilder rebuilds the view in rdb from the cluster the kgo options reach.
type Rebuilder struct {
	rdb   redis.UniversalClient
	base  []kgo.Opt
	log   *zap.Logger
	fence string // the schedulers' transactional id prefix ("": no fence)
}

// New returns a Rebuilder; base are the kgo options every client starts from
// (seed brokers, TLS, SASL...). It fences the schedulers' transactional ids
// of fence.DefaultPrefix (WithFence).
func New(rdb redis.UniversalClient, base []kgo.Opt, log *zap.Logger) *Rebuilder {
	return &Rebuilder{rdb: rdb, base: base, log: log, fence: fence.DefaultPrefix}
}

// WithFence sets the schedulers' transactional id prefix
// (WR_SCHEDULER_TRANSACTIONAL_ID) the rebuild fences before it reads
// waitroom.admissions; empty: no fence (a check of what the fence closes).
func (b *Rebuilder) WithFence(prefix string) *Rebuilder {
	b.fence = prefix
	return b
}

// Run takes the rebuild lock, marks the view rebuilding, replays the three
// topics up to their end offsets at the start into the emptied view, fences every
// item above the highest epoch on the record, and marks the view ready with
// the offsets it applied. Records produced meanwhile are applied afterwards
// by the consumer, behind everyone already in line.
func (b *Rebuilder) Run(ctx context.Context, o Options) (Report, error) {
	o = o.withDefaults()
	start := time.Now()
	gen := newGen(o.Now())
	if err := b.lock(ctx, gen, o.LockTTL); err != nil {
		return Report{}, err
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	go b.renew(lctx, gen, o.LockTTL)
	defer b.release(ctx, gen)

	if len(o.Items) > 0 {
		return b.runItems(ctx, lctx, gen, o, start)
	}
	return b.runView(ctx, lctx, gen, o, start)
}

// lock takes the rebuild lock for gen (ErrLocked: someone else holds it).
// The client retries a SET whose answer was lost (a connection reset after
// Redis ran it), and the retry finds the lock its first try took: the lock
// is ours when it holds gen (each Run's own), else, unrenewed, it would
// stop every rebuild until its TTL ran out.
func (b *Rebuilder) lock(ctx context.Context, gen string, ttl time.Duration) error {
	ok, err := b.rdb.SetNX(ctx, view.LockKey, gen, ttl).Result()
	if err != nil {
		return fmt.Errorf("take the rebuild lock: %w", err)
	}
	if ok {
		return nil
	}
	held, err := b.rdb.Get(ctx, view.LockKey).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read the rebuild lock: %w", err)
	}
	if held != gen {
		return ErrLocked
	}
	return nil
}

// withDefaults is o with its zero fields set to their defaults.
func (o Options) withDefaults() Options {
	if o.Settle <= 0 {
		o.Settle = time.Second
	}
	if o.Progress <= 0 {
		o.Progress = time.Second
	}
	if o.LockTTL <= 0 {
		o.LockTTL = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Reason == "" {
		o.Reason = "rebuild requested"
	}
	return o
}

// release gives up the rebuild lock of gen, even after ctx ended.
func (b *Rebuilder) release(ctx context.Context, gen string) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := releaseScript.Run(uctx, b.rdb, []string{view.LockKey}, gen).Err(); err != nil {
		b.log.Warn("release the rebuild lock", zap.Error(err))
	}
}

// runView rebuilds the whole view, under the lock of gen (lctx ends when the
// lock is lost).
func (b *Rebuilder) runView(ctx, lctx context.Context, gen string, o Options, start time.Time) (Report, error) {
	if o.UnlessReady {
		m, ok, err := view.Read(ctx, b.rdb)
		if err != nil {
			return Report{}, err
		}
		if ok && m.State == view.Ready {
			return Report{}, ErrNotNeeded
		}
	}
	if err := view.SetRebuilding(ctx, b.rdb, gen, o.Reason); err != nil {
		return Report{}, err
	}
	b.log.Error("rebuilding the Redis view from Kafka", zap.String("gen", gen), zap.String("reason", o.Reason))
	select {
	case <-ctx.Done():
		return Report{}, fmt.Errorf("rebuild: %w", ctx.Err())
	case <-time.After(o.Settle):
	}

	rep := Report{Gen: gen}
	r := newReplayer(lctx, b.rdb)
	defer r.stop()
	r.full = o.FullReplay
	applied, err := b.replay(r, &rep)
	if err != nil {
		return rep, err
	}
	rep.ReadTook = time.Since(start)

	wstart := time.Now()
	fence, settled, err := b.settle(ctx, r, o.Now().UnixMilli())
	if err != nil {
		return rep, err
	}
	if err := markRebuilt(ctx, b, gen, r.order); err != nil {
		return rep, err
	}
	if err := view.SetReady(ctx, b.rdb, gen, applied, o.Now()); err != nil {
		return rep, err
	}
	rep.written(wstart, start, fence, len(r.order), settled)
	b.log.Info("view rebuilt", zap.String("gen", gen), zap.Int64("records", rep.Records), zap.Int("snapshots", rep.Snapshots), zap.Strings("torn", rep.Torn), zap.Int("items", rep.Items),
		zap.Int("waiting", rep.Waiting), zap.Int("admitted", rep.Admitted), zap.Int64("epoch", fence), zap.Duration("took", rep.Took),
		zap.Duration("read", rep.ReadTook), zap.Duration("fence", rep.FenceTook), zap.Duration("write", rep.WriteTook))
	return rep, nil
}

// written completes rep once the replayed items are written (from wstart;
// the rebuild started at start) and settled under fence.
func (rep *Report) written(wstart, start time.Time, fence int64, items int, settled []queue.Settled) {
	rep.WriteTook, rep.Took, rep.Epoch, rep.Items = time.Since(wstart), time.Since(start), fence, items
	for _, s := range settled {
		rep.Waiting += int(s.Waiting)
		rep.Admitted += int(s.Admitted)
	}
}

// settle ends a replay at now (unix ms): the epoch counter is raised above
// every epoch on the record (a leader paused since before the loss holds at
// most the highest and is refused on every item), the replayed items are
// settled under that fence (queue.Line.Settle) and their waiting places get
// a sign of life (replayer.seen). It returns the fence.
func (b *Rebuilder) settle(ctx context.Context, r *replayer, now int64) (int64, []queue.Settled, error) {
	fence, err := raiseScript.Run(ctx, b.rdb, []string{EpochKey}, strconv.FormatInt(r.maxEpoch+1, 10)).Int64()
	if err != nil {
		return 0, nil, fmt.Errorf("raise the epoch counter: %w", err)
	}
	settled, err := r.line.Settle(ctx, r.order, now, fence)
	if err != nil {
		return 0, nil, err
	}
	if err := r.seen(now); err != nil {
		return 0, nil, err
	}
	return fence, settled, nil
}

// replay empties the view and applies the three topics up to their current
// ends through the live scripts (replay.go): the items, then the
// registrations with each admission event right after the records it was
// decided after. It returns the end offsets applied, for the marker.
func (b *Rebuilder) replay(r *replayer, rep *Report) (map[string]int64, error) {
	ctx := r.ctx
	cl, err := kgo.NewClient(b.base...)
	if err != nil {
		return nil, fmt.Errorf("kafka admin client: %w", err)
	}
	defer cl.Close()
	fstart := time.Now()
	if err := b.fenceSchedulers(ctx, cl); err != nil {
		return nil, err
	}
	rep.FenceTook = time.Since(fstart)
	adm := kadm.NewClient(cl)
	bs := map[string]bounds{}
	for _, t := range []string{topics.Items, topics.Admissions, topics.Registrations} {
		if bs[t], err = offsets(ctx, adm, t); err != nil {
			return nil, err
		}
	}
	if r.want == nil { // the whole view: what the old one listed goes (a per-item rebuild empties each item as it meets it)
		stale, err := b.rdb.SMembers(ctx, queue.ActiveItems).Result()
		if err != nil {
			return nil, fmt.Errorf("read the old active items: %w", err)
		}
		if err := r.wipe(stale...); err != nil {
			return nil, err
		}
		if err := b.rdb.Del(ctx, queue.ActiveItems).Err(); err != nil {
			return nil, fmt.Errorf("empty the active items: %w", err)
		}
	}
	if err := r.line.Load(ctx); err != nil {
		return nil, err
	}
	for _, t := range []string{topics.Items, topics.Admissions, topics.Registrations} {
		r.records.Add(bs[t].count())
	}
	n, err := read(ctx, b.base, topics.Items, bs[topics.Items], nil, func(rec *kgo.Record, _ any) error { r.replayed.Add(1); return r.item(rec) })
	rep.Records += n
	if err != nil {
		return nil, err
	}
	n, err = read(ctx, b.base, topics.Admissions, bs[topics.Admissions], nil, func(rec *kgo.Record, _ any) error { r.replayed.Add(1); return r.admission(rec) })
	rep.Records += n
	if err != nil {
		return nil, err
	}
	regs, err := b.snapshots(r, bs[topics.Registrations], rep)
	if err != nil {
		return nil, err
	}
	for p, se := range regs {
		r.start[p] = se[0]
	}
	r.records.Add(regs.count() - bs[topics.Registrations].count()) // a snapshot's records are not read
	n, err = read(ctx, b.base, topics.Registrations, regs, decodeRegistration, func(rec *kgo.Record, v any) error {
		r.replayed.Add(1)
		return r.registration(rec, v)
	})
	rep.Records += n
	if err != nil {
		return nil, err
	}
	if err := r.rest(); err != nil { // flushes and waits for the applier
		return nil, err
	}
	applied := map[string]int64{}
	for _, t := range []string{topics.Registrations, topics.Admissions} {
		for p, se := range bs[t] {
			applied[view.Field(t, p)] = se[1]
		}
	}
	return applied, nil
}

// fenceSchedulers takes every shard's transactional id over, before the
// end offsets are read. A tick that confirmed the view before it was marked
// rebuilding may still publish its admissions, late (a slow link, a paused
// process): landing after the end offsets were read, they would be missing
// from the rebuilt line and their people admitted again. The fence aborts
// such a transaction and refuses its producer whatever it sends from now
// on; the admissions are then read committed, up to the last stable offset.
func (b *Rebuilder) fenceSchedulers(ctx context.Context, cl *kgo.Client) error {
	if b.fence == "" {
		return nil
	}
	if err := fence.Fence(ctx, cl, fence.IDs(b.fence)...); err != nil {
		return fmt.Errorf("fence the schedulers before reading %s: %w", topics.Admissions, err)
	}
	return nil
}

func (b *Rebuilder) renew(ctx context.Context, gen string, ttl time.Duration) {
	retry.Every(ctx, ttl/3, false, func(ctx context.Context) error {
		return renewScript.Run(ctx, b.rdb, []string{view.LockKey}, gen, ttl.Milliseconds()).Err()
	}, func(err error, _ bool) { b.log.Warn("renew the rebuild lock", zap.Error(err)) })
}

func newGen(now time.Time) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return strconv.FormatInt(now.UnixMilli(), 36) + "-" + hex.EncodeToString(r[:])
}

var (
	releaseScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	renewScript   = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`)
	// raise sets the counter to at least ARGV[1] and returns its value.
	raiseScript = redis.NewScript(`local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if cur < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) return tonumber(ARGV[1]) end
return cur`)
)
