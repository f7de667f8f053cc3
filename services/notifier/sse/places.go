package sse

import (
	"context"
	"sync"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// maxPlaceBatch bounds the tokens of one exact-read round trip.
const maxPlaceBatch = 256

// placeReads merges the exact place reads of the streams of one item that
// fall due together (a snapshot wakes them all) into one round trip
// (queue.Line.PlaceMany): a read with none of its item's in flight goes at
// once; reads that arrive while one is in flight wait for it and go
// together next. So an idle notifier adds no wait, a busy one one round
// trip at most, and go-redis's cost per read is paid per batch.
type placeReads struct {
	line    *queue.Line
	timeout time.Duration

	mu   sync.Mutex
	tail map[string]*placeBatch // per item, the last batch made (open or in flight)
}

// placeBatch is one round trip: tokens join while it is open.
type placeBatch struct {
	prev    *placeBatch // the item's batch before it: this one goes when it is done
	open    bool
	toks    []string
	done    chan struct{}
	places  []line.Place
	waiting []bool
	err     error
}

func newPlaceReads(l *queue.Line, timeout time.Duration) *placeReads {
	return &placeReads{line: l, timeout: timeout, tail: map[string]*placeBatch{}}
}

// Place answers as queue.Line.Place(ctx, item, tok), in a batch of the
// item's reads.
func (r *placeReads) Place(ctx context.Context, item, tok string) (line.Place, bool, error) {
	r.mu.Lock()
	b, lead := r.tail[item], false
	if b == nil || !b.open || len(b.toks) >= maxPlaceBatch {
		b, lead = &placeBatch{prev: b, open: true, done: make(chan struct{})}, true
		r.tail[item] = b
	}
	i := len(b.toks)
	b.toks = append(b.toks, tok)
	r.mu.Unlock()
	if lead {
		r.run(ctx, item, b)
	} else {
		select {
		case <-b.done:
		case <-ctx.Done():
			return line.Place{}, false, ctx.Err()
		}
	}
	if b.err != nil {
		return line.Place{}, false, b.err
	}
	return b.places[i], b.waiting[i], nil
}

// run waits for the item's batch in flight, closes b and reads its places.
// The read outlives the leader's cancellation: others wait on it.
func (r *placeReads) run(ctx context.Context, item string, b *placeBatch) {
	if b.prev != nil {
		<-b.prev.done // bounded by its read timeout
	}
	r.mu.Lock()
	b.open, b.prev = false, nil
	r.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	b.places, b.waiting, b.err = r.line.PlaceMany(rctx, item, b.toks)
	cancel()
	r.mu.Lock()
	if r.tail[item] == b {
		delete(r.tail, item)
	}
	r.mu.Unlock()
	close(b.done)
}
