package rebuild

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/waitroom/waitroom/pkg/foundation/retry"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// markRebuilt gives every line of a whole-view rebuild its item marker
// (token gen) and lists them in the view's registry, replacing what the old
// view listed (and its lost and skipped items: the rebuild covers them).
func markRebuilt(ctx context.Context, b *Rebuilder, gen string, ids []string) error {
	if err := b.rdb.Del(ctx, view.RegistryKey, view.LostKey, view.SkippedKey).Err(); err != nil {
		return fmt.Errorf("clear the view's registry: %w", err)
	}
	return view.MarkItems(ctx, b.rdb, gen, ids)
}

// runItems rebuilds only o.Items, lost while the rest of the view is
// trusted: the view's marker is not touched and the other items are served
// and applied throughout. Each item is marked rebuilding (its records are
// not applied meanwhile: the consumer passes over them and notes the last
// it passed over), its line is replayed from the topics up to their ends and
// written under a new token, and it is marked rebuilt with those ends. What
// the consumer skipped at or after an end is applied again by the consumer
// (it rewinds the partition there, ingest.Gated) before the item is trusted;
// an item nothing was skipped of is trusted at once.
func (b *Rebuilder) runItems(ctx, lctx context.Context, gen string, o Options, start time.Time) (Report, error) {
	now := o.Now()
	cur, err := b.markRebuilding(ctx, o, now)
	if err != nil {
		return Report{}, err
	}
	b.log.Error("rebuilding lost items from Kafka", zap.Strings("items", o.Items), zap.String("gen", gen), zap.String("reason", o.Reason))
	// Every consumer must skip the items' records before the ends are read.
	if err := sleep(ctx, o.Settle); err != nil {
		return Report{}, err
	}
	rep := Report{Gen: gen}
	want := make(map[string]bool, len(o.Items))
	for _, it := range o.Items {
		want[it] = true
	}
	r := newReplayer(lctx, b.rdb)
	defer r.stop()
	r.want = func(item string) bool { return want[item] }
	r.full = o.FullReplay
	stop := b.progress(ctx, r, o.Progress, o.Items, cur)
	applied, err := b.replay(r, &rep)
	stop()
	if err != nil {
		return rep, err
	}
	n := rep.Records
	rep.ReadTook = time.Since(start)
	wstart := time.Now()
	var gone []string // on no record: whatever the lost node got meanwhile goes
	for _, it := range o.Items {
		if !r.touched[it] {
			gone = append(gone, it)
		}
	}
	if err := r.wipe(gone...); err != nil {
		return rep, err
	}
	fence, settled, err := b.settle(ctx, r, now.UnixMilli())
	if err != nil {
		return rep, err
	}
	if err := view.MarkItems(ctx, b.rdb, gen, o.Items); err != nil {
		return rep, err
	}
	ends := registrationEnds(applied)
	for _, it := range o.Items {
		li := cur[it]
		li.State, li.Records, li.Left, li.Ends, li.Rebuilt = view.ItemRebuilt, n, 0, ends, time.Now().UnixMilli()
		if err := view.SetLost(ctx, b.rdb, it, li); err != nil {
			return rep, err
		}
	}
	// Once every consumer knows the items are rebuilt (and no longer skips
	// them), an item none of whose records was skipped at or after its end
	// is complete.
	if err := sleep(ctx, o.Settle); err != nil {
		return rep, err
	}
	if err := b.trustComplete(ctx, o.Items, ends); err != nil {
		return rep, err
	}
	rep.written(wstart, start, fence, len(r.order), settled)
	b.log.Info("items rebuilt", zap.Strings("items", o.Items), zap.String("gen", gen), zap.Int64("records", n),
		zap.Int("waiting", rep.Waiting), zap.Int("admitted", rep.Admitted), zap.Duration("took", rep.Took))
	return rep, nil
}

// markRebuilding marks each of o.Items rebuilding (lost since now unless
// already lost) and returns their marks.
func (b *Rebuilder) markRebuilding(ctx context.Context, o Options, now time.Time) (map[string]view.LostItem, error) {
	cur, _, err := view.Lost(ctx, b.rdb, o.Items...)
	if err != nil {
		return nil, err
	}
	for _, it := range o.Items {
		li := cur[it]
		li.Since = cmp.Or(li.Since, now.UnixMilli())
		li.State, li.Reason = view.ItemRebuilding, cmp.Or(li.Reason, o.Reason)
		if err := view.SetLost(ctx, b.rdb, it, li); err != nil {
			return nil, err
		}
		cur[it] = li
	}
	return cur, nil
}

// progress writes on each of items' lost marks (cur) how many records r
// reads and how many are left, every interval until stop is called (which
// waits for the last write).
func (b *Rebuilder) progress(ctx context.Context, r *replayer, every time.Duration, items []string, cur map[string]view.LostItem) (stop func()) {
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		retry.Every(pctx, every, false, func(ctx context.Context) error {
			total := r.records.Load()
			var errs []error
			for _, it := range items {
				li := cur[it]
				li.Records, li.Left = total, max(total-r.replayed.Load(), 0)
				if err := view.SetLost(ctx, b.rdb, it, li); err != nil {
					errs = append(errs, fmt.Errorf("item %s: %w", it, err))
				}
			}
			return errors.Join(errs...)
		}, func(err error, _ bool) { b.log.Warn("write a rebuild's progress", zap.Error(err)) })
	}()
	return func() { cancel(); <-done }
}

// registrationEnds are the next offsets of waitroom.registrations the replay
// applied, by partition.
func registrationEnds(applied map[string]int64) map[string]int64 {
	ends := map[string]int64{}
	for f, next := range applied {
		if t, p, ok := view.ParseField(f); ok && t == topics.Registrations {
			ends[strconv.Itoa(int(p))] = next
		}
	}
	return ends
}

// trustComplete trusts each rebuilt item of items none of whose records the
// consumer skipped at or after its end (ends); the consumer applies the
// others' skipped records again first.
func (b *Rebuilder) trustComplete(ctx context.Context, items []string, ends map[string]int64) error {
	lost, skipped, err := view.Lost(ctx, b.rdb, items...)
	if err != nil {
		return err
	}
	for _, it := range items {
		if li, ok := lost[it]; !ok || li.State != view.ItemRebuilt {
			continue
		}
		if sk, ok := skipped[it]; ok && sk.Offset >= ends[strconv.Itoa(int(sk.Partition))] {
			continue // the consumer of that partition applies it again first
		}
		if err := view.Found(ctx, b.rdb, it); err != nil {
			return err
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("rebuild: %w", ctx.Err())
	case <-time.After(d):
		return nil
	}
}
