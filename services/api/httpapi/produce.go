package httpapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// produceWait is one record, its key and value, and its wait: pooled, so a
// produce allocates none of them. The record is the first field, so
// its address is the wait's and one promise function (settleRecord) serves
// every produce without a closure per record.
//
// A wait is held by the handler that produced it, by the record's promise
// (the Kafka client owns the record until the promise fires, however long
// after the handler's answer that is) and by the expiring queue; the last
// of the three to let go returns it to the pool (release).
type produceWait struct {
	rec      kgo.Record // first: see settleRecord
	deadline time.Time
	state    atomic.Uint32
	refs     atomic.Int32   // holders left, see release
	err      error          // written by the one settle, read after done
	done     sync.WaitGroup // Add(1) before the record is handed over
	kv       []byte         // the record's key and value
}

// waitHolders holds a new wait: the handler, the promise, the expiring queue.
const waitHolders = 3

// maxPooledKV is the largest key-and-value buffer a pooled wait keeps.
const maxPooledKV = 16 << 10

var waitPool = sync.Pool{New: func() any { return new(produceWait) }}

// newProduceWait returns a wait held by its three holders, its record's key
// item and value ev's encoding, due at deadline.
func newProduceWait(ev *topics.RegistrationEvent, deadline time.Time) *produceWait {
	w := waitPool.Get().(*produceWait)
	w.deadline = deadline
	w.refs.Store(waitHolders)
	n := len(ev.ItemID)
	kv := append(slices.Grow(w.kv[:0], n+topics.RegistrationSize(ev)), ev.ItemID...)
	w.kv = topics.AppendRegistration(kv, ev)
	w.rec.Topic, w.rec.Key, w.rec.Value = topics.Registrations, w.kv[:n:n], w.kv[n:]
	w.done.Add(1)
	return w
}

// release lets go of one hold on w; the last returns it, cleared, to the
// pool. A record is thus never handed to the Kafka client again before its
// last promise fired (TestPooledRecordIsNotReusedBeforeItsPromise).
func (w *produceWait) release() {
	switch n := w.refs.Add(-1); {
	case n > 0:
		return
	case n < 0:
		panic("httpapi: a produce wait released more often than it was held")
	}
	kv := w.kv[:0]
	if cap(kv) > maxPooledKV {
		kv = nil
	}
	*w = produceWait{kv: kv} // the record's context and bytes too: none outlives its registration
	waitPool.Put(w)
}

// The record must stay produceWait's first field (the index is out of
// range, and the build fails, otherwise).
var _ = [1]struct{}{}[unsafe.Offsetof(produceWait{}.rec)]

// settleRecord is the promise of a record produceBounded sent: r is the
// first field of its produceWait, which the promise lets go of.
func settleRecord(r *kgo.Record, err error) {
	w := (*produceWait)(unsafe.Pointer(r))
	w.settle(err)
	w.release()
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
			w.release()
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

// produceBounded sends ev keyed by its item to Kafka and waits for the
// broker's answer, at most the produce timeout, and returns where the record
// was written. The record is handed over with TryProduce: only when the
// client's buffer is full does it wait for room, in Produce, with a context
// bounded by what is left of the timeout (the one path that sets a timer).
func (s *Server) produceBounded(ctx context.Context, ev *topics.RegistrationEvent, start time.Time) (part int32, off int64, err error) {
	w := newProduceWait(ev, start.Add(s.opt.ProduceTimeout))
	defer w.release()
	s.waits.add(w)
	s.prod.TryProduce(ctx, &w.rec, settleRecord)
	w.done.Wait()
	if err = w.err; errors.Is(err, kgo.ErrMaxBuffered) {
		err = s.produceBlocking(ctx, w)
	}
	if err != nil { // a late promise may still be writing the record
		return 0, 0, err
	}
	return w.rec.Partition, w.rec.Offset, nil
}

// produceBlocking hands w's record, refused by a full buffer, to Produce,
// which waits for room, and waits for its promise until w's deadline. The
// promise holds w again: it may fire after the deadline.
func (s *Server) produceBlocking(ctx context.Context, w *produceWait) error {
	bctx, cancel := context.WithDeadline(ctx, w.deadline)
	defer cancel()
	done := make(chan error, 1)
	w.refs.Add(1)
	s.prod.Produce(bctx, &w.rec, func(_ *kgo.Record, err error) {
		done <- err
		w.release()
	})
	select {
	case err := <-done:
		return err
	case <-bctx.Done():
		return fmt.Errorf("%w (%s), the client's buffer full: %w", errProduceTimeout, s.opt.ProduceTimeout, bctx.Err())
	}
}
