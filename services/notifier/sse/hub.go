// Package sse is the notifier: it streams where a queue token stands to the
// browser over Server-Sent Events, fed by waitroom.admissions and waitroom.items.
package sse

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/topics"
)

// Items is where the notifier looks items up (the in-memory item cache).
type Items interface {
	Get(item string) (topics.ItemState, bool)
}

// Snapshot is what this notifier knows of one item at one moment. Snapshots
// are immutable; a newer one replaces it (with the next Version) and the
// feed's waves wake the item's streams for it.
type Snapshot struct {
	// Version counts the publishes of this item on this notifier: a subscriber
	// that sees it jump by more than one skipped states (it was slow).
	Version uint64
	// Head is the highest sequence admitted so far, from the admission events
	// (0 until this notifier saw one): the watermark positions come from.
	Head int64
	// Waiting is how many wait, as of the latest admission event.
	Waiting int64
	// At is when the scheduler made the latest admission event (unix ms; 0: none).
	At int64
	// Verdict is the item's state from waitroom.items.
	Verdict registration.Verdict
	// Notice is the operator's message to everyone waiting (waitroom.items).
	Notice string
}

// Feed is one item's current snapshot and how many local streams watch it.
type Feed struct {
	item string
	cur  atomic.Pointer[Snapshot]
	subs int // guarded by Hub.mu
	// admits are the waiting streams by live token, told first when an
	// admission event names them (guarded by Hub.mu).
	admits map[string]chan *Admit
	// Positions are coalesced (Hub.SetPositionEvery): want is the newest
	// state while dirty (not yet published), pubAt the last publish, flush
	// the timer that publishes want (all guarded by Hub.mu).
	want  Snapshot
	dirty bool
	pubAt time.Time
	flush *time.Timer
	// waves wakes the item's streams for a new snapshot slice by slice
	// (the generation is the snapshot's Version).
	waves waves
}

// Admit tells a waiting stream that an admission event admitted its token,
// until Until; the stream calls Done once its admitted event is written. It
// goes by pointer: a channel of pointers is the smaller one a stream holds
// while it waits, and a stream's wait receives it in an 8-byte slot of its
// stack frame (BENCHMARKS: h2c memory).
type Admit struct {
	Until time.Time
	At    int64 // the event's time (unix ms)
	wg    *sync.WaitGroup
}

// Done says the admitted event is written (or the stream gave up).
func (a *Admit) Done() {
	if a.wg != nil {
		a.wg.Done()
	}
}

// admitFirstWait bounds how long an admission event waits for the streams it
// admitted before it wakes every other stream of the item.
const admitFirstWait = 100 * time.Millisecond

// Latest returns the item's current snapshot.
func (f *Feed) Latest() *Snapshot { return f.cur.Load() }

// Hub fans each item's admission events and state changes out to the item's
// local streams. The streams an admission event admits are told first, each
// on its own channel, and the event waits (at most admitFirstWait) until they
// have written their admitted event before it wakes the item's other streams:
// so admission delivery does not grow with the number of streams that only
// learn a new position. A publish costs O(1) whatever the number of streams: it
// swaps the item's snapshot and asks the item's waves to wake its streams,
// slice by slice (wave.go); each stream then reads the newest snapshot when it
// gets to it, so a slow stream skips states instead of queueing them (the
// latest state, never a backlog) and can never hold the publisher up.
type Hub struct {
	items Items

	mu    sync.Mutex
	feeds map[string]*Feed

	// beats wakes the streams for the heartbeat slice by slice; beatGen
	// counts the heartbeats (the generation streams compare).
	beats    waves
	beatGen  atomic.Uint64
	stop     chan struct{}
	stopOnce sync.Once
	onStop   []func() // called once stopped (guarded by mu)

	// stale counts admission events older than what the hub holds (at-least-once
	// replays, a late event of a previous leader): they change nothing.
	stale atomic.Int64

	// every is how often at most an item's admission events wake its streams
	// for their positions (0: at every event); see SetPositionEvery.
	every time.Duration
}

// SetPositionEvery makes admission events wake an item's streams at most once
// per d (the newest state then, never a backlog): a stream sends at most one
// position per d anyway, and each wake of every stream costs CPU that grows
// with the number of streams. Admitted streams are told at once regardless
// (WatchAdmission), and item state changes publish at once. Call it before
// the hub is used.
func (h *Hub) SetPositionEvery(d time.Duration) { h.every = max(d, 0) }

// NewHub returns a Hub judging items with items (nil: every item is open).
func NewHub(items Items) *Hub {
	return &Hub{items: items, feeds: map[string]*Feed{}, stop: make(chan struct{})}
}

// Run beats the heartbeat every heartbeat and re-judges the watched items
// every itemPoll until ctx ends; then it stops every stream.
func (h *Hub) Run(ctx context.Context, heartbeat, itemPoll time.Duration) {
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	poll := time.NewTicker(itemPoll)
	defer poll.Stop()
	defer h.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			h.Beat()
		case <-poll.C:
			h.RecheckItems()
		}
	}
}

// Stop ends every stream (they return at once) and refuses new ones.
func (h *Hub) Stop() {
	h.stopOnce.Do(func() {
		h.mu.Lock()
		close(h.stop)
		fs := h.onStop
		h.onStop = nil
		h.mu.Unlock()
		for _, f := range fs {
			f()
		}
	})
}

// afterStop calls f once the hub stopped (at once if it has).
func (h *Hub) afterStop(f func()) {
	h.mu.Lock()
	select {
	case <-h.stop:
		h.mu.Unlock()
		f()
		return
	default:
	}
	h.onStop = append(h.onStop, f)
	h.mu.Unlock()
}

// Stopped is closed once the hub stopped.
func (h *Hub) Stopped() <-chan struct{} { return h.stop }

// Beat wakes every stream to write a heartbeat, slice by slice (waves).
func (h *Hub) Beat() { h.beats.wake(h.beatGen.Add(1), false) }

// waitBeat returns what the stream of beat slot slot, which saw heartbeat
// gen, waits on for the next one (closed: one came already) and the gate to
// leave once the wait ends.
func (h *Hub) waitBeat(slot int, gen uint64) (<-chan struct{}, *gate) {
	g := h.beats.enter(slot)
	if h.beatGen.Load() != gen {
		return closedCh, g
	}
	return g.ch, g
}

// waitSnapshot is waitBeat for f's snapshots: version is the one the stream saw.
func (f *Feed) waitSnapshot(slot int, version uint64) (<-chan struct{}, *gate) {
	g := f.waves.enter(slot)
	if f.cur.Load().Version != version {
		return closedCh, g
	}
	return g.ch, g
}

// Subscribe registers a stream of item and returns its feed; the caller must
// Unsubscribe it.
func (h *Hub) Subscribe(item string) *Feed {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[item]
	if f == nil {
		f = &Feed{item: item}
		f.waves.gap = h.every // a stream's positions are paced as the hub's publishes
		v, n := h.itemState(item)
		f.cur.Store(&Snapshot{Verdict: v, Notice: n})
		h.feeds[item] = f
	}
	f.subs++
	return f
}

// Unsubscribe forgets a stream; an item without streams is forgotten (its
// events are then skipped by a map look-up).
func (h *Hub) Unsubscribe(f *Feed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f.subs--
	if f.subs == 0 && h.feeds[f.item] == f {
		delete(h.feeds, f.item)
		if f.flush != nil {
			f.flush.Stop()
			f.flush = nil
		}
	}
}

// Items reports how many items have local streams.
func (h *Hub) Items() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.feeds)
}

// Admission applies an admission event. Events are at least once and may
// come late, so one whose head is behind the item's is dropped, and one that
// changes neither head nor waiting count wakes nobody. It reports whether the
// item's state changed (its streams are woken now, or at the end of the
// position interval: SetPositionEvery).
func (h *Hub) Admission(ev topics.AdmissionEvent) bool {
	if wg := h.admitFirst(ev); wg != nil {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		t := time.NewTimer(admitFirstWait)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[ev.ItemID]
	if f == nil {
		return false
	}
	return h.publishPaced(f, func(s *Snapshot) bool {
		if ev.Head < s.Head || (ev.Head == s.Head && s.At != 0 && ev.At <= s.At) {
			h.stale.Add(1)
			return false
		}
		if ev.Head == s.Head && ev.Waiting == s.Waiting && s.At != 0 {
			return false // a replay of what we hold
		}
		s.Head, s.Waiting, s.At = ev.Head, ev.Waiting, ev.At
		return true
	})
}

// WatchAdmission returns the channel on which the stream of live token tok
// of f's item is told its admission; UnwatchAdmission ends it.
func (h *Hub) WatchAdmission(f *Feed, tok string) <-chan *Admit {
	c := make(chan *Admit, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if f.admits == nil {
		f.admits = map[string]chan *Admit{}
	}
	f.admits[tok] = c
	return c
}

// UnwatchAdmission forgets the watch of tok made with c (a later watch of the
// same token by another stream stays).
func (h *Hub) UnwatchAdmission(f *Feed, tok string, c <-chan *Admit) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := f.admits[tok]; ok && (<-chan *Admit)(cur) == c {
		delete(f.admits, tok)
	}
}

// admitFirst tells the watching streams of the tokens ev admitted, with the
// expiry the event carries (the scheduler's decision, as the view has it), and
// returns what to wait on (nil: nobody told). Events without expiries (older
// ones) leave the streams to find out from the view.
func (h *Hub) admitFirst(ev topics.AdmissionEvent) *sync.WaitGroup {
	if len(ev.Admitted) == 0 || len(ev.ExpiresAt) != len(ev.Admitted) {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.feeds[ev.ItemID]
	if f == nil || len(f.admits) == 0 {
		return nil
	}
	var wg *sync.WaitGroup
	for i, tok := range ev.Admitted {
		c, ok := f.admits[tok]
		if !ok || ev.ExpiresAt[i] <= 0 { // 0: no longer admitted when published (completed, left)
			continue
		}
		delete(f.admits, tok)
		if wg == nil {
			wg = &sync.WaitGroup{}
		}
		wg.Add(1)
		select {
		case c <- &Admit{Until: time.UnixMilli(ev.ExpiresAt[i]), At: ev.At, wg: wg}:
		default: // told already
			wg.Done()
		}
	}
	return wg
}

// RecheckItems re-judges every watched item and wakes the streams of those
// whose verdict or notice changed: O(watched items).
func (h *Hub) RecheckItems() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for item, f := range h.feeds {
		v, n := h.itemState(item)
		h.publish(f, func(s *Snapshot) bool {
			if s.Verdict == v && s.Notice == n {
				return false
			}
			s.Verdict, s.Notice = v, n
			return true
		})
	}
}

// Stale counts admission events dropped as older than the item's head.
func (h *Hub) Stale() int64 { return h.stale.Load() }

// itemState is what the item cache says of item: its verdict and notice.
func (h *Hub) itemState(item string) (registration.Verdict, string) {
	if h.items == nil {
		return registration.Open, ""
	}
	st, ok := h.items.Get(item)
	return registration.VerdictOf(st, ok), st.Notice
}

// rejectMessage is item's rejectMessage ("": none set, or unknown item).
func (h *Hub) rejectMessage(item string) string {
	if h.items == nil {
		return ""
	}
	st, _ := h.items.Get(item)
	return st.RejectMessage
}

// publish replaces f's snapshot with a copy of its newest state changed by
// change (when it reports a change) and wakes the watchers of the old one at
// once. Callers hold h.mu.
func (h *Hub) publish(f *Feed, change func(*Snapshot) bool) bool {
	s := h.newest(f)
	if !change(&s) {
		return false
	}
	h.publishNow(f, s, true)
	return true
}

// publishPaced is publish for admission events: with SetPositionEvery, a
// change within the interval after the last publish is held, and the newest
// state goes out at the interval's end. Callers hold h.mu.
func (h *Hub) publishPaced(f *Feed, change func(*Snapshot) bool) bool {
	s := h.newest(f)
	if !change(&s) {
		return false
	}
	wait := h.every - time.Since(f.pubAt)
	if h.every <= 0 || wait <= 0 {
		h.publishNow(f, s, false)
		return true
	}
	f.want, f.dirty = s, true
	if f.flush == nil {
		f.flush = time.AfterFunc(wait, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if f.dirty && h.feeds[f.item] == f {
				h.publishNow(f, f.want, false)
			}
		})
	}
	return true
}

// newest is f's newest state: held (not yet published) or current.
func (h *Hub) newest(f *Feed) Snapshot {
	if f.dirty {
		return f.want
	}
	return *f.cur.Load()
}

// publishNow makes s f's snapshot and wakes the item's streams for it slice
// by slice (waves; urgent: an item state change, which does not wait for the
// waves' gap). Callers hold h.mu.
func (h *Hub) publishNow(f *Feed, s Snapshot, urgent bool) {
	s.Version = f.cur.Load().Version + 1
	f.cur.Store(&s)
	f.waves.wake(s.Version, urgent)
	f.dirty, f.want = false, Snapshot{}
	f.pubAt = time.Now()
	if f.flush != nil {
		f.flush.Stop()
		f.flush = nil
	}
}
