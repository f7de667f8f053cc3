package promote

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// drawRepublish is how long a published draw is not published again while
// the consumer has not applied it yet (a copy would only be a no-op).
const drawRepublish = 5 * time.Second

// draws remembers the draws this replica published lately, so a tick does
// not publish a draw again before the consumer applied it.
type draws struct {
	mu      sync.Mutex
	sent    map[string]sentDraw // item -> its last published draw
	checked time.Time           // the last tick that looked for due draws
}

// checkDue reports whether a tick at now should look for due draws: the
// first tick, then once every interval.
func (d *draws) checkDue(now time.Time, every time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.checked.IsZero() && now.Sub(d.checked) < every && now.After(d.checked) {
		return false
	}
	d.checked = now
	return true
}

type sentDraw struct {
	window int64
	at     time.Time
}

// drawDue publishes the draw of every item of items whose pool holds a window
// that closed by now: round = the chain's last drawn round + 1 (1 for a new
// commitment), its seed revealed. Two leaders publishing the same draw is
// harmless: the consumer applies a window once.
func (s *Scheduler) drawDue(ctx context.Context, items []string, now time.Time) {
	due, err := s.line.DueDraws(ctx, items, now.UnixMilli())
	if err != nil {
		s.log.Warn("read due draws", zap.Error(err))
		return
	}
	var recs []*kgo.Record
	s.draws.mu.Lock()
	if s.draws.sent == nil {
		s.draws.sent = map[string]sentDraw{}
	}
	for _, d := range due {
		if last, ok := s.draws.sent[d.Item]; ok && last.window == d.Window && time.Since(last.at) < drawRepublish {
			continue
		}
		ev, err := s.drawOf(d)
		if err != nil {
			s.m.drawErrors.Inc()
			s.log.Error("cannot draw", zap.String("item", d.Item), zap.Int64("window", d.Window), zap.Error(err))
			continue
		}
		recs = append(recs, &kgo.Record{Topic: topics.Registrations, Key: []byte(d.Item), Value: topics.Encode(&ev)})
		s.draws.sent[d.Item] = sentDraw{window: d.Window, at: time.Now()}
	}
	s.draws.mu.Unlock()
	if len(recs) == 0 {
		return
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, r := range s.prod.ProduceSync(pctx, recs...) {
		if r.Err != nil {
			s.m.drawErrors.Inc()
			s.log.Warn("publish a draw; it goes out with a next tick", zap.String("item", string(r.Record.Key)), zap.Error(r.Err))
			s.draws.mu.Lock()
			delete(s.draws.sent, string(r.Record.Key))
			s.draws.mu.Unlock()
			continue
		}
		s.m.draws.Inc()
		s.log.Info("draw published", zap.String("item", string(r.Record.Key)), zap.Int64("offset", r.Record.Offset))
	}
}

// drawOf is the draw record of d: the next round of the item's chain.
func (s *Scheduler) drawOf(d queue.DueDraw) (topics.RegistrationEvent, error) {
	if len(s.opt.DrawKey) == 0 {
		return topics.RegistrationEvent{}, errNoDrawKey
	}
	if d.Commit == "" || d.Rounds < 1 {
		return topics.RegistrationEvent{}, errNoCommit
	}
	round := int64(1)
	if d.LastCommit == d.Commit {
		round = d.LastRound + 1
	}
	root := draw.Root(s.opt.DrawKey, d.Item, d.Salt)
	seed, err := draw.Seed(root, d.Rounds, round)
	if err != nil {
		return topics.RegistrationEvent{}, err // the chain is used up: the admin API makes a new one
	}
	if err := draw.Verify(seed, round, d.Commit); err != nil {
		return topics.RegistrationEvent{}, err // another key made the commitment
	}
	return topics.RegistrationEvent{V: topics.Version, Kind: topics.KindDraw, ItemID: d.Item, RequestedAt: time.Now().UnixMilli(),
		Draw: &topics.Draw{Window: d.Window, Round: round, Seed: seed, Commit: d.Commit}}, nil
}

type drawError string

func (e drawError) Error() string { return string(e) }

const (
	errNoDrawKey = drawError("WR_DRAW_KEY is not set on this scheduler: it cannot reveal the item's draw seed")
	errNoCommit  = drawError("the item has a pool but no draw commitment")
)
