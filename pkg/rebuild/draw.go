package rebuild

import (
	"github.com/waitroom/waitroom/pkg/draw"
	"github.com/waitroom/waitroom/topics"
)

// fair is an item's pre-queue as the replay builds it, exactly as
// pkg/queue's enqueue.lua, draw.lua and draw_finish.lua do: the records'
// windows and draw records decide everything, no clock.
type fair struct {
	pooled      int64    // live pooled tokens
	late        []string // tokens queued behind a pending draw, in record order (ended ones skipped)
	lateLive    int64
	drawnWindow int64
	drawnRound  int64
	drawnCommit string
	// lateAfter is the highest pooled window when the late ones last began
	// to queue: they are placed once every window up to it is drawn (0: never set).
	lateAfter int64
}

// waitsForDraw pools or queues-late a new register as enqueue.lua does, and
// reports whether it did (false: it takes the next seq).
func (it *item) waitsForDraw(tok, user string, window, offset int64) bool {
	switch {
	case window > it.drawnWindow:
		it.tokens[tok] = &token{user: user, pool: window}
		it.pooled++
	case it.lateLive > 0 || window == 0 && it.pooled > 0:
		if it.lateLive == 0 {
			it.lateAfter = 0
			for _, t := range it.tokens {
				if t.ended == 0 && t.pool > 0 {
					it.lateAfter = max(it.lateAfter, t.pool)
				}
			}
		}
		it.tokens[tok] = &token{user: user, late: offset}
		it.late = append(it.late, tok)
		it.lateLive++
	default:
		return false
	}
	it.users[user] = tok
	return true
}

// unpool counts a pooled or late token that left.
func (it *item) unpool(t *token) {
	switch {
	case t.pool > 0:
		it.pooled--
	case t.seq == 0:
		it.lateLive--
	}
}

// draw applies a draw record as the consumer does: a seed that does not hash
// to its commitment, or a round of the chain drawn already, is dead-lettered
// (offset only); a window drawn already changes nothing; else the pooled
// tokens of windows up to the draw's take seqs in the seed's order, then,
// once no window up to lateAfter is pooled, the late ones in record order.
func (m *Model) draw(it *item, ev *topics.RegistrationEvent, partition int32, offset int64) {
	it.applied[partition] = max(it.applied[partition], offset)
	d := ev.Draw
	if draw.Verify(d.Seed, d.Round, d.Commit) != nil || d.Window <= it.drawnWindow {
		return
	}
	if d.Commit == it.drawnCommit && d.Round <= it.drawnRound {
		return
	}
	var ids []string
	for tok, t := range it.tokens {
		if t.ended == 0 && t.pool > 0 && t.pool <= d.Window {
			ids = append(ids, tok)
		}
	}
	if draw.Order(d.Seed, ids) != nil {
		return
	}
	for _, tok := range ids {
		t := it.tokens[tok]
		it.seq++
		t.seq, t.pool = it.seq, 0
		it.pooled--
	}
	if !it.pooledUpTo(it.lateAfter) {
		for _, tok := range it.late {
			if t := it.tokens[tok]; t.ended == 0 && t.seq == 0 {
				it.seq++
				t.seq = it.seq
			}
		}
		it.late, it.lateLive = nil, 0
	}
	it.drawnWindow, it.drawnRound, it.drawnCommit = d.Window, d.Round, d.Commit
}

// pooledUpTo reports a live pooled token of a window up to w (w 0: any).
func (it *item) pooledUpTo(w int64) bool {
	if it.pooled == 0 {
		return false
	}
	for _, t := range it.tokens {
		if t.ended == 0 && t.pool > 0 && (w == 0 || t.pool <= w) {
			return true
		}
	}
	return false
}
