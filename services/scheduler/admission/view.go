package admission

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/queue"
	"github.com/waitroom/waitroom/pkg/view"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// trusted reports whether the view may be promoted: a scheduler admits nobody
// while Redis is empty, older than the record or being rebuilt.
func (s *Scheduler) trusted() bool {
	ok, _ := s.opt.View.Trusted()
	return ok
}

// claim publishes that epoch is taken, before its first promote: a rebuild
// of a lost Redis reads the highest epoch ever used back from the topic and
// fences every item above it.
func (s *Scheduler) claim(ctx context.Context, epoch int64) error {
	ev := topics.AdmissionEvent{V: topics.Version, Kind: topics.KindEpochClaim, ItemID: topics.EpochClaimItem,
		Admitted: []string{}, Epoch: epoch, At: s.now().UnixMilli()}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res := s.prod.ProduceSync(cctx, &kgo.Record{Topic: topics.Admissions, Key: []byte(topics.EpochClaimItem), Value: topics.Encode(&ev)})
	if err := res.FirstErr(); err != nil {
		return fmt.Errorf("claim epoch %d on %s: %w", epoch, topics.Admissions, err)
	}
	if err := s.advance(cctx, res); err != nil {
		s.log.Warn("advance the view marker past the epoch claim", zap.Error(err))
	}
	return nil
}

// expiries reads the admission expiry of each of tokens from the admitted
// set, so a rebuild restores every admission exactly; a token no longer
// admitted (completed or left a moment ago) gets 0. nil when Redis does not
// answer: the event then goes out without expiries (a rebuild falls back to
// its time plus the session TTL).
func (s *Scheduler) expiries(ctx context.Context, item string, tokens []string) []int64 {
	if len(tokens) == 0 {
		return nil
	}
	v, err := s.rdb.ZMScore(ctx, queue.KeysFor(item).Admitted, tokens...).Result()
	if err != nil {
		s.log.Warn("read admission expiries", zap.String("item", item), zap.Error(err))
		return nil
	}
	out := make([]int64, len(v))
	for i, e := range v {
		out[i] = int64(e)
	}
	return out
}

// expiriesOf is expiries of every item's first page in one pipelined round
// (one round trip per item made a busy tick wait on 1,000 of them).
func (s *Scheduler) expiriesOf(ctx context.Context, items []dueItem) [][]int64 {
	out := make([][]int64, len(items))
	cmds := make([]*redis.FloatSliceCmd, len(items))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, d := range items {
			if len(d.tk.Unpublished) > 0 {
				cmds[i] = p.ZMScore(ctx, queue.KeysFor(d.item).Admitted, d.tk.Unpublished...)
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("read admission expiries", zap.Int("items", len(items)), zap.Error(err))
	}
	for i, c := range cmds {
		if c == nil || c.Err() != nil {
			continue // nil: the event goes out without expiries
		}
		v := c.Val()
		out[i] = make([]int64, len(v))
		for j, e := range v {
			out[i][j] = int64(e)
		}
	}
	return out
}

// advance records on the view's marker the admission events just published,
// so a Redis rolled back to before them is noticed as older than the record.
func (s *Scheduler) advance(ctx context.Context, res kgo.ProduceResults) error {
	next := map[int32]int64{}
	for _, r := range res {
		if r.Err == nil && r.Record.Offset+1 > next[r.Record.Partition] {
			next[r.Record.Partition] = r.Record.Offset + 1
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
