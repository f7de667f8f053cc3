package promote

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// trusted reports whether the view may be promoted: a scheduler admits nobody
// while Redis is empty, older than the record or being rebuilt.
func (s *Scheduler) trusted() bool {
	ok, _ := s.opt.View.Trusted()
	return ok
}

// confirmed checks, right before a tick writes, that Redis still holds the
// view this scheduler trusts with at least the writes it saw (its own
// ticks' among them: see touch), on the node it was made ready on, and
// counts the tick's writes to come. A Redis rolled back since, or any other
// node (a failover, even to a replica whose writes since outnumber what it
// missed; a restart: view/node.go), is refused here, before anyone is
// admitted again, and judged at once (the view is marked stale, and the
// consumer rebuilds it).
func (s *Scheduler) confirmed(ctx context.Context) bool {
	if err := s.opt.View.Confirm(ctx); err != nil {
		s.m.viewSkipped.Inc()
		if errors.Is(err, view.ErrNotTrusted) && s.opt.View != nil {
			s.opt.View.Check(ctx)
		} else {
			s.log.Warn("confirm the view before a tick", zap.Error(err))
		}
		return false
	}
	if err := s.touch(ctx); err != nil {
		s.log.Warn("count the tick on the view marker", zap.Error(err))
		return false
	}
	return true
}

// stillConfirmed confirms again, after a tick's promotes and before it
// publishes them, that the view is the one the tick confirmed (same
// generation, ready, the node it was made ready on): a promote retried by
// the client on a newly promoted node, or written into a line a rebuild
// started on meanwhile, is not published. A view found changed is judged at
// once, as in confirmed.
func (s *Scheduler) stillConfirmed(ctx context.Context) bool {
	err := s.opt.View.Confirm(ctx)
	if err == nil {
		return true
	}
	s.m.viewSkipped.Inc()
	if errors.Is(err, view.ErrNotTrusted) {
		s.opt.View.Check(ctx)
	} else {
		s.log.Warn("confirm the view before publishing a tick", zap.Error(err))
	}
	return false
}

// touch counts a write on the view marker (through the watcher, which
// remembers the count, when there is one).
func (s *Scheduler) touch(ctx context.Context) error {
	if s.opt.View != nil {
		return s.opt.View.Touch(ctx)
	}
	return view.Touch(ctx, s.rdb)
}

// claim publishes that epoch is taken, before its first promote: a rebuild
// of a lost Redis reads the highest epoch ever used back from the topic and
// fences every item above it.
func (s *Scheduler) claim(ctx context.Context, out Producer, epoch int64) error {
	ev := topics.AdmissionEvent{V: topics.Version, Kind: topics.KindEpochClaim, ItemID: topics.EpochClaimItem,
		Admitted: []string{}, Epoch: epoch, At: s.now().UnixMilli()}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res := out.ProduceSync(cctx, &kgo.Record{Topic: topics.Admissions, Key: []byte(topics.EpochClaimItem), Value: topics.Encode(&ev)})
	if err := res.FirstErr(); err != nil {
		return fmt.Errorf("claim epoch %d on %s: %w", epoch, topics.Admissions, err)
	}
	if err := s.advance(cctx, out, res); err != nil {
		s.log.Warn("advance the view marker past the epoch claim", zap.Error(err))
	}
	return nil
}

// advance records on the view's marker the admission events just published
// on out, so a Redis rolled back to before them is noticed as older than
// the record. A transaction's events are followed by its commit marker,
// which the topic's end counts too: the marker is advanced past it
// (committedPast).
func (s *Scheduler) advance(ctx context.Context, out Producer, res kgo.ProduceResults) error {
	next := map[int32]int64{}
	for _, r := range res {
		if r.Err == nil && r.Record.Offset+1 > next[r.Record.Partition] {
			next[r.Record.Partition] = r.Record.Offset + 1
		}
	}
	if len(next) > 0 {
		if err := committedPast(ctx, out, next); err != nil {
			s.log.Warn("read the admissions' last stable offsets", zap.Error(err))
		}
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for part, n := range next {
			view.Advance(ctx, p, topics.Admissions, part, n)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("advance the view marker: %w", err)
	}
	return nil
}

// activeItems lists the items to tick: the registry of items with a line
// (wr:items:active) and the view's own registry of the items it holds, as
// of the watcher's last check. The two list the same items, but in a Redis
// Cluster they live on different masters: a master restarted empty with
// wr:items:active on it would otherwise stop every item's admissions until
// each item's next registration. Items the view lists that the active set
// lost are written back to it (SADD: idempotent, not part of the view), so
// the console and the retention check see them too.
func (s *Scheduler) activeItems(ctx context.Context) ([]string, error) {
	items, err := s.line.ActiveItems(ctx)
	if err != nil {
		return nil, err
	}
	reg := s.opt.View.Status().Registry
	if len(reg) == 0 {
		return items, nil
	}
	have := make(map[string]bool, len(items))
	for _, it := range items {
		have[it] = true
	}
	var back []string
	for it := range reg {
		if !have[it] {
			back = append(back, it)
		}
	}
	if len(back) == 0 {
		return items, nil
	}
	sort.Strings(back)
	s.log.Warn("items with a line missing from the active set: ticked, and written back", zap.Int("items", len(back)), zap.Strings("first", back[:min(len(back), 10)]))
	if err := s.line.AddActive(ctx, back...); err != nil {
		s.log.Warn("write items back to the active set", zap.Error(err))
	}
	return append(items, back...), nil
}
