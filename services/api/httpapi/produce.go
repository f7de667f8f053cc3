package httpapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
)

// A produce waits for the broker's answer at most the produce timeout, and a
// wait sets no timer of its own: every wait has the same timeout, so the
// order waits begin in is the order they expire in, and one goroutine (alive
// only while waits are pending) fails them in that order. A timer per
// request (context.WithTimeout) was about 15% of the register handler's CPU.
//
// The Kafka client cannot be the bound alone: it fails a record whose time
// is up (kgo.RecordDeliveryTimeout, set to the same timeout) only while the
// record is not yet sent, and one already on a connection that stopped
// answering waits for that connection's own timeouts, far past ours.

// errProduceTimeout answers a wait the broker did not answer in time.
var errProduceTimeout = errors.New("no answer from Kafka in time")

// expireEvery bounds how late past its deadline a wait is failed, as a share
// of the timeout; expireTick caps it, and so how long answered waits stay
// queued before they are dropped (at 20,000 registrations a second, 1,000).
const (
	expireEvery = 10
	expireTick  = 50 * time.Millisecond
)

// wait states: pending until the broker's promise or the deadline, whichever
// comes first, settles it.
const (
	waitPending uint32 = iota
	waitSettled
)

// produceWait is one record and its wait: the record and the wait's
// WaitGroup are fields, so a produce allocates them together (a channel
// would be an allocation of its own). The record is the first field, so its
// address is the wait's and one promise function (settleRecord) serves
// every produce without a closure per record.
type produceWait struct {
	rec      kgo.Record // first: see settleRecord
	deadline time.Time
	state    atomic.Uint32
	err      error          // written by the one settle, read after done
	done     sync.WaitGroup // Add(1) before the record is handed over
}

// The record must stay produceWait's first field (the index is out of
// range, and the build fails, otherwise).
var _ = [1]struct{}{}[unsafe.Offsetof(produceWait{}.rec)]

// settleRecord is the promise of a record produceBounded sent: r is the
// first field of its produceWait.
func settleRecord(r *kgo.Record, err error) {
	(*produceWait)(unsafe.Pointer(r)).settle(err)
}

// settle answers the wait with err unless it was answered already.
func (w *produceWait) settle(err error) {
	if w.state.CompareAndSwap(waitPending, waitSettled) {
		w.err = err
		w.done.Done()
	}
}

// produceWaits expires pending produce waits in the order they began.
type produceWaits struct {
	timeout time.Duration
	mu      sync.Mutex
	q       []*produceWait // oldest first
	running bool           // expire's goroutine is alive
}

// add queues w and starts the expiring goroutine if none is alive.
func (p *produceWaits) add(w *produceWait) {
	p.mu.Lock()
	p.q = append(p.q, w)
	start := !p.running
	p.running = true
	p.mu.Unlock()
	if start {
		go p.expire()
	}
}

// expire fails the waits whose deadline passed and drops the answered ones
// from the head of the queue, every timeout/expireEvery, until none is left.
func (p *produceWaits) expire() {
	tick := min(p.timeout/expireEvery, expireTick)
	late := fmt.Errorf("%w (%s)", errProduceTimeout, p.timeout)
	for {
		time.Sleep(tick)
		now := time.Now()
		p.mu.Lock()
		n := 0
		for _, w := range p.q {
			if w.state.Load() == waitPending && now.Before(w.deadline) {
				break
			}
			w.settle(late)
			n++
		}
		clear(p.q[:n])
		p.q = p.q[n:]
		if len(p.q) == 0 {
			p.q, p.running = nil, false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// produceBounded sends rec's value keyed by key to Kafka and waits for the
// broker's answer, at most the produce timeout. The record is handed over
// with TryProduce: only when the client's buffer is full does it wait for
// room, in Produce, with a context bounded by what is left of the timeout
// (the one path that sets a timer).
func (s *Server) produceBounded(ctx context.Context, key, value []byte, start time.Time) (*kgo.Record, error) {
	w := &produceWait{deadline: start.Add(s.opt.ProduceTimeout)}
	w.rec.Topic, w.rec.Key, w.rec.Value = topics.Registrations, key, value
	w.done.Add(1)
	s.waits.add(w)
	s.prod.TryProduce(ctx, &w.rec, settleRecord)
	w.done.Wait()
	err := w.err
	if !errors.Is(err, kgo.ErrMaxBuffered) {
		return &w.rec, err
	}
	bctx, cancel := context.WithDeadline(ctx, w.deadline)
	defer cancel()
	done := make(chan error, 1)
	s.prod.Produce(bctx, &w.rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err = <-done:
	case <-bctx.Done():
		err = fmt.Errorf("%w (%s), the client's buffer full: %w", errProduceTimeout, s.opt.ProduceTimeout, bctx.Err())
	}
	return &w.rec, err
}
