package sse

import (
	"cmp"
	"sync"
	"sync/atomic"
	"time"
)

// wakeSlices is how many slices a wave wakes a set of streams in (an item's
// streams for a new snapshot, or every stream for the heartbeat): a stream
// joins slice n % wakeSlices, n counting the set's streams as they come, so
// at 19,800 streams on one item a slice holds ~77.
const wakeSlices = 256

// sliceWait bounds how long a wave waits for one slice's woken streams to act
// on the wake before it wakes the next one (reached only when the CPU is
// starved or a stream is stuck; a slice normally takes a few milliseconds).
const sliceWait = 20 * time.Millisecond

// closedCh is a closed channel: a select on it goes on at once.
var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// gate is one slice's wake-up for one wave: the streams of the slice wait on
// ch, and the wave closes it, then waits until every stream that waited left
// the wait (they acted on the wake: leave) before it wakes the next slice.
type gate struct {
	ch      chan struct{}
	waiting atomic.Int32 // streams that entered and have not left
	shut    atomic.Bool
	drained chan struct{} // closed once shut and nobody waits any more
	at      time.Time     // when the wave closed ch (written before it did)
	once    sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{}), drained: make(chan struct{})} }

// leave ends a stream's wait on g (woken or not).
func (g *gate) leave() {
	if g.waiting.Add(-1) == 0 && g.shut.Load() {
		g.once.Do(func() { close(g.drained) })
	}
}

// waves wakes a set of streams slice by slice instead of all at once. Closing
// one channel that 19,800 streams wait on puts all of them in the Go
// scheduler's run queue at once, and a goroutine that becomes runnable behind
// them (the admissions follower reading the next admission event, an admitted
// stream told first) waits until every one of them ran: hundreds of
// milliseconds on two cores. A wave wakes one slice, waits until its streams
// acted on it, then wakes the next, so whatever else becomes runnable waits
// behind one or two slices, never the whole set. Streams that are not waiting
// when their slice's turn comes (busy writing) see the newer generation when
// they next look (enter, then compare generations), so none is missed.
type waves struct {
	slices [wakeSlices]atomic.Pointer[gate]
	joined atomic.Uint32
	// patience is how long a wave waits for a slice (0: sliceWait).
	patience time.Duration
	// gap, when positive, is the least time between two wakes of one slice
	// by paced waves (set before use; see Hub.SetPositionEvery), and last
	// when each slice was woken (only the wave goroutine touches it).
	gap  time.Duration
	last *[wakeSlices]time.Time
	// hurry cuts a paced wave's waits short (an urgent wake came).
	hurry chan struct{}

	mu      sync.Mutex
	want    uint64 // the newest generation asked for (guarded by mu)
	urgent  bool   // the wave asked for must not keep the gap (guarded by mu)
	running bool   // a wave goroutine runs (guarded by mu)
}

// slot returns the slice of a stream joining the set.
func (w *waves) slot() int { return int((w.joined.Add(1) - 1) % wakeSlices) }

// enter returns the gate the stream of slot waits on; the stream must then
// compare the generation it saw with the newest (the wave may have passed its
// slice already) and call leave on the gate once its wait ends.
func (w *waves) enter(slot int) *gate {
	p := &w.slices[slot]
	g := p.Load()
	if g == nil {
		ng := newGate()
		if p.CompareAndSwap(nil, ng) {
			g = ng
		} else {
			g = p.Load()
		}
	}
	g.waiting.Add(1)
	return g
}

// wake wakes every waiting stream of the set, slice by slice, for generation
// gen (stored where the streams look before this call). A wave under way goes
// on and then passes again for the newer generation.
//
// With a gap, a wave wakes no slice sooner than gap after the previous wave
// woke it: the streams of an item are then woken at a steady cadence, each
// about gap after its last wake, so a stream that paces its own positions to
// one per gap seldom has to hold one back on a timer of its own (such timers
// fire unpaced, all together, and would undo the waves). urgent (an item
// state change) wakes every slice without keeping the gap.
func (w *waves) wake(gen uint64, urgent bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.want = max(w.want, gen)
	if urgent {
		w.urgent = true
		select {
		case w.hurry <- struct{}{}:
		default:
		}
	}
	if !w.running {
		w.running = true
		if w.hurry == nil {
			w.hurry = make(chan struct{}, 1)
		}
		go w.run()
	}
}

func (w *waves) run() {
	var done uint64
	patience := cmp.Or(w.patience, sliceWait)
	t := time.NewTimer(patience)
	t.Stop()
	for {
		w.mu.Lock()
		gen, urgent := w.want, w.urgent
		if gen <= done {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.urgent = false
		select {
		case <-w.hurry: // asked before this pass: urgent says it
		default:
		}
		w.mu.Unlock()
		if w.gap > 0 && w.last == nil {
			w.last = new([wakeSlices]time.Time)
		}
		for i := range w.slices {
			p := &w.slices[i]
			g := p.Load()
			if g == nil || g.waiting.Load() == 0 {
				continue // nobody waits: whoever enters later sees gen
			}
			if w.gap > 0 {
				if d := time.Until(w.last[i].Add(w.gap)); d > 0 && !urgent {
					t.Reset(d)
					select {
					case <-t.C:
					case <-w.hurry:
						urgent = true
					}
					t.Stop()
				}
				w.last[i] = time.Now()
			}
			p.Store(newGate())
			g.at = time.Now()
			g.shut.Store(true)
			close(g.ch)
			if g.waiting.Load() == 0 {
				continue
			}
			t.Reset(patience)
			select {
			case <-g.drained:
			case <-t.C:
			}
			t.Stop()
		}
		done = gen
	}
}
