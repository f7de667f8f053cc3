package sse

import (
	"cmp"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/foundation/retry"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Payloads of the events (the `data:` JSON).
type (
	// Position is a waiting registration's place.
	Position struct {
		Position     int64 `json:"position"`
		WaitingTotal int64 `json:"waitingTotal"`
		// EtaSeconds is absent while admission is paused.
		EtaSeconds *int64 `json:"etaSeconds,omitempty"`
	}
	// Admitted carries the admission token; the stream ends after it.
	Admitted struct {
		AdmissionToken string `json:"admissionToken"`
		ExpiresAt      string `json:"expiresAt"`
	}
	// Terminal says why the stream ends (sold_out, closed, expired, left,
	// completed, rejected) or that the registration is not in the line yet (pending).
	// A rejected one carries the item's rejectMessage, the operator's word to
	// the people it refuses, when one is set.
	Terminal struct {
		Status  string `json:"status"`
		Message string `json:"message,omitempty"`
	}
	// Notice is the data of a notice event: the operator's message to
	// everyone waiting ("" when it was cleared).
	Notice struct {
		Notice string `json:"notice"`
	}
	// PreQueue is the data of a pre_queue event: the registration waits for
	// the draw due at DrawAt (unix ms), which places InDraw people so far.
	PreQueue struct {
		Status string `json:"status"`
		DrawAt int64  `json:"drawAt"`
		InDraw int64  `json:"inDraw"`
	}
)

// stream is one open SSE response and what it knows of its registration. It
// runs on the request's goroutine; nothing else touches it.
type stream struct {
	s  *Server
	w  interface{ Write([]byte) (int, error) }
	rc interface {
		SetWriteDeadline(time.Time) error
		Flush() error
	}
	q    token.Queue
	feed *Feed
	conn net.Conn // the bare connection of a hijacked stream (nil: net/http's writer)
	// gone is closed when the client left a stream on net/http's handler
	// (its request's Done; nil: hijacked, found gone at a heartbeat).
	// Only the wait watches it: the stream's reads hang on a context of
	// their own, as one hung on the request's would leave net/http's stream
	// context holding the map of its children for the stream's life.
	gone <-chan struct{}

	tok string // the user's live token (a repeat registration keeps the first)
	// seq is the registration's place number; refHead and refPos are the
	// item's head and the exact position read with it (0: not in the line yet).
	seq, refHead, refPos int64
	total, totalAt       int64             // waiting count and when it was true (unix ms)
	pace                 registration.Pace // the item's admissions, at the last exact read
	// progress is the id of the last event: seq - position while waiting,
	// seq once admitted. Positions never increase, so ids never decrease,
	// whichever replica serves the stream; Last-Event-ID seeds it.
	progress int64
	// ceiling bounds the position to report: the last one sent, or the one
	// Last-Event-ID implies. 0: none yet.
	ceiling int64
	notice  string // the item's notice sent last
	sentPos int64  // last position event, to send only changes
	sentTot int64
	sentEta int64 // -1: none
	pending bool  // told "pending", polling until the line has the registration
	drawAt  int64 // told "pre_queue" for the draw due then (unix ms), polling until it placed the registration
	// pendingWaits are the delays of the pending re-reads: 25 ms, doubling up
	// to Options.PendingPoll (a registration is usually applied within tens of
	// ms); nil while the registration is not pending.
	pendingWaits interface{ NextBackOff() time.Duration }
	version      uint64
	// The times below are unix nanoseconds (0: none), not time.Time: 8
	// bytes each instead of 24 keep the struct a size class smaller.
	nextRead int64 // next exact read from Redis while events arrive
	lastRead int64
	recheck  *time.Timer
	armed    bool
	// Position events are paced: at most one per Options.PositionEvery; a
	// change inside the interval is held and the latest one goes out at its end.
	sentAt  int64
	held    *time.Timer
	holding bool
	// admit is where the hub tells this stream its admission first, for the
	// live token watching (see Hub.WatchAdmission).
	admit    <-chan *Admit
	watching string
	// alive is the sign of life this stream holds for its waiting place
	// (pkg/store/liveness), released when the stream ends or the place changes.
	alive    func()
	aliveTok string
	// The slices of the item's and the heartbeat's waves this stream is woken
	// in, the heartbeat it saw, and the gates it waits on (left once woken).
	slot, beatSlot int
	beatGen        uint64
	gate, beatGate *gate
	snap           *Snapshot // the item's snapshot the stream acted on last
	wokeAt         int64     // when the wave being acted on woke the stream (0: not woken by one)
	// cur is the cursor of the last exact read, sent in every event's id
	// ("": none); resume, the checked cursor the stream opened with (nil:
	// it opened from a Redis read), dropped once acted on.
	cur    string
	resume *cursor
}

// leave ends the stream's waits on its wave gates.
func (st *stream) leave() {
	if st.gate != nil {
		st.gate.leave()
		st.gate = nil
	}
	if st.beatGate != nil {
		st.beatGate.leave()
		st.beatGate = nil
	}
}

var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// lastEventID parses Last-Event-ID (or ?lastEventId= for clients that cannot
// set it): the progress, and the cursor after it ("": none). A progress
// that is not a non-negative number is ignored, and its cursor with it.
func lastEventID(c *gin.Context) (progress int64, cur string) {
	v := c.GetHeader("Last-Event-ID")
	if v == "" {
		v = c.Query("lastEventId")
	}
	v, cur, _ = strings.Cut(v, ".")
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, ""
	}
	return n, cur
}

func retryLine(d time.Duration) []byte {
	return []byte("retry: " + strconv.FormatInt(d.Milliseconds(), 10) + "\n\n")
}

var ping = []byte(": ping\n\n")

// write writes b and flushes it within the write timeout; an error ends the
// stream (the client is gone or stopped reading).
func (st *stream) write(b []byte) error {
	_ = st.rc.SetWriteDeadline(st.s.now().Add(st.s.opt.WriteTimeout))
	_, err := st.w.Write(b)
	if err == nil {
		err = st.rc.Flush()
	}
	if err != nil {
		st.s.m.writeFails.Inc()
	}
	return err
}

// send writes one event with the stream's progress as its id.
func (st *stream) send(event string, data []byte, at int64) error {
	bp := bufs.Get().(*[]byte)
	b := append((*bp)[:0], "id: "...)
	b = strconv.AppendInt(b, st.progress, 10)
	if st.cur != "" {
		b = append(b, '.')
		b = append(b, st.cur...)
	}
	b = append(b, "\nevent: "...)
	b = append(b, event...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	err := st.write(b)
	*bp = b
	bufs.Put(bp)
	if err != nil {
		return err
	}
	st.s.m.delivered[event].Inc()
	if at > 0 {
		st.s.m.latency[event].Observe(max(0, float64(st.s.now().UnixMilli()-at)/1000))
	}
	return nil
}

// run streams until the registration reaches a final state, the client
// leaves, a write fails or the hub stops: start, then loop, then end. ctx
// is what the stream's reads hang on (see gone).
func (st *stream) run(ctx context.Context, status *line.Status) {
	defer st.end()
	if !st.start(ctx, status) {
		st.loop(ctx)
	}
}

// loop waits for what concerns the stream and acts on it until the stream
// ends (run's, whose caller calls end after it).
//
// A stream spends its life parked in loop's select, and the Go runtime
// halves a parked goroutine's stack at a GC only while less than a quarter
// of it is in use: so loop's own frame is kept small (the work of each case
// is in methods that are not inlined into it, it defers nothing, and each
// case it drops saves 20 bytes), which lets an idle stream's stack shrink to
// 4 KiB: a hijacked one's, with ~350 bytes to spare, and one on net/http's
// HTTP/2 handler below the Front, with ~80 bytes to spare (Go 1.26;
// BenchmarkStreams' stack-bytes/stream tells; BENCHMARKS: h2c memory).
func (st *stream) loop(ctx context.Context) {
	for {
		recheck, held := st.prepare()
		// Woken slice by slice (waves): a new snapshot of the item, a heartbeat.
		var next, beat <-chan struct{}
		next, st.gate = st.feed.waitSnapshot(st.slot, st.version)
		beat, st.beatGate = st.s.hub.waitBeat(st.beatSlot, st.beatGen)
		var over bool
		select {
		case <-st.gone:
			return
		case a := <-st.admit:
			over = st.onAdmit(a)
		case <-st.s.ending():
			return // the hub stopped, or the view is lost: the client reconnects (elsewhere, or is told VIEW_REBUILDING)
		case <-next:
			over = st.itemLost() || st.onWake(ctx, next == closedCh)
		case <-beat:
			over = st.itemLost() || st.onBeat(ctx)
		case <-held:
			over = st.onHeld()
		case <-recheck:
			over = st.onRecheck(ctx)
		}
		if over {
			return
		}
	}
}

// itemLost ends the stream when its item alone is lost (its Redis node lost
// its keys): nothing read from the view is told after.
//
//go:noinline
func (st *stream) itemLost() bool { return st.s.itemLost(st.q.ItemID) }

// start subscribes the stream and acts on the status read at connect; true
// ends the stream.
//
//go:noinline
func (st *stream) start(ctx context.Context, status *line.Status) bool {
	// Subscribe before the first exact read, so no event between the two is lost.
	st.feed = st.s.hub.Subscribe(st.q.ItemID)
	st.slot, st.beatSlot, st.beatGen = st.feed.waves.slot(), st.s.hub.beats.slot(), st.s.hub.beatGen.Load()
	st.snap = st.feed.Latest()
	st.version = st.snap.Version
	if st.notify(st.snap) {
		return true
	}
	if st.resume != nil {
		return st.resumed(ctx, st.snap)
	}
	return st.settle(ctx, *status, st.snap, 0)
}

// resumed acts on the cursor the stream opened with, without reading Redis:
// the place it names waits, unless the item is no longer open or the head
// this notifier saw passed it (then the status is read as without one).
// What the cursor cannot say (the place left, a pace for the ETA) comes
// with the next exact read: at the first heartbeat or admission event that
// finds the RefreshRate budget; true ends the stream.
func (st *stream) resumed(ctx context.Context, snap *Snapshot) bool {
	c := *st.resume
	st.resume = nil
	if snap.Verdict != registration.Open || snap.Head >= c.seq {
		return st.full(ctx, snap)
	}
	st.tok = st.q.TokenID
	if st.progress > 0 && st.progress < c.seq {
		st.ceiling = c.seq - st.progress
	}
	st.seq, st.refHead, st.refPos = c.seq, c.refHead, c.refPos
	st.total, st.totalAt = snap.Waiting, snap.At
	st.cur = st.s.issueCursor(st.q.ItemID, st.q.TokenID, c)
	st.nextRead = st.s.now().Add(jitter(st.s.opt.Refresh)).UnixNano() // lastRead stays 0: read at the first heartbeat
	return st.position(snap, 0)
}

// end releases what the stream holds (nothing before start subscribed it).
//
//go:noinline
func (st *stream) end() {
	if st.feed == nil {
		return
	}
	st.leave()
	st.unwatch()
	if st.recheck != nil {
		st.recheck.Stop()
	}
	if st.held != nil {
		st.held.Stop()
	}
	if st.alive != nil {
		st.alive()
	}
	st.s.hub.Unsubscribe(st.feed)
}

// prepare renews the stream's sign of life and admission watch before it
// waits, and returns its armed timers' channels (nil: not armed).
//
//go:noinline
func (st *stream) prepare() (recheck, held <-chan time.Time) {
	if st.armed {
		recheck = st.recheck.C
	}
	if st.holding {
		held = st.held.C
	}
	// Pending too: a place applied late (consumer lag) is alive from
	// the first flush, not only from when the stream learns its seq.
	// Only items with an idle timeout need it (checked again at each wake
	// until one is set): a hold costs a few hundred bytes a stream.
	if tok := cmp.Or(st.tok, st.q.TokenID); tok != st.aliveTok && st.s.seen != nil && (st.alive != nil || st.s.wantsSeen(st.q.ItemID)) {
		if st.alive != nil {
			st.alive()
		}
		st.aliveTok, st.alive = tok, st.s.seen.Hold(st.q.ItemID, tok, st.q.PlaceKey())
	}
	if st.tok != st.watching && st.seq > 0 {
		st.unwatch()
		st.watching, st.admit = st.tok, st.s.hub.WatchAdmission(st.feed, st.tok)
	}
	return recheck, held
}

// unwatch stops watching for the admission of the token watched so far; an
// admission told meanwhile is released (the event need not wait for it).
func (st *stream) unwatch() {
	if st.admit == nil {
		return
	}
	st.s.hub.UnwatchAdmission(st.feed, st.watching, st.admit)
	select {
	case a := <-st.admit:
		a.Done()
	default:
	}
}

// onAdmit acts on the event that admitted this token, told before the item's
// other streams hear of it: no Redis read between the two. The stream ends.
//
//go:noinline
func (st *stream) onAdmit(a *Admit) bool {
	st.leave()
	st.admitted(a.Until, a.At)
	a.Done()
	return true
}

// onWake acts on a newer snapshot of the item (seen before waiting: not
// woken by the wave); true ends the stream.
//
//go:noinline
func (st *stream) onWake(ctx context.Context, seen bool) bool {
	if !seen {
		st.wokeAt = st.gate.at.UnixNano() // written before the gate closed
	}
	// The wave waits for its slice to leave: leaving once the work is done
	// keeps the run queue at one slice of streams.
	defer st.leave()
	s := st.feed.Latest()
	if s.Version == st.version {
		st.wokeAt = 0
		return false // a later pass of a wave this stream had seen
	}
	st.snap = s
	over := st.onSnapshot(ctx, s)
	st.wokeAt = 0
	return over
}

// onBeat writes the heartbeat (and, after a long quiet, re-reads the exact
// position); true ends the stream.
//
//go:noinline
func (st *stream) onBeat(ctx context.Context) bool {
	st.leave()
	gen := st.s.hub.beatGen.Load()
	if gen == st.beatGen {
		return false // a later pass of a heartbeat this stream had seen
	}
	st.beatGen = gen
	if st.conn != nil && peerClosed(st.conn) {
		return true // nobody reads a hijacked stream to notice the close: look
	}
	if st.write(ping) != nil {
		return true
	}
	if now := st.s.now(); st.seq > 0 && !st.pending && time.Duration(now.UnixNano()-st.lastRead) >= st.s.opt.IdleRefresh && st.s.reads.AllowN(now, 1) {
		return st.exact(ctx, st.snap, 0)
	}
	return false
}

// onHeld sends the position held back by the pacing; true ends the stream.
//
//go:noinline
func (st *stream) onHeld() bool {
	st.leave()
	st.holding = false
	return st.position(st.snap, st.snap.At)
}

// onRecheck re-reads the registration (pending, or Redis trouble); true ends
// the stream.
//
//go:noinline
func (st *stream) onRecheck(ctx context.Context) bool {
	st.leave()
	st.armed = false
	return st.full(ctx, st.snap)
}

// arm schedules a full re-read (pending registration, or Redis trouble).
func (st *stream) arm(d time.Duration) {
	if st.recheck == nil {
		st.recheck = time.NewTimer(d)
	} else {
		st.recheck.Reset(d)
	}
	st.armed = true
}

// full reads the registration's status and acts on it; true ends the stream.
func (st *stream) full(ctx context.Context, snap *Snapshot) bool {
	rctx, cancel := context.WithTimeout(ctx, st.s.opt.ReadTimeout)
	status, err := st.s.line.Status(rctx, st.q.ItemID, st.q.PlaceKey(), st.q.TokenID, st.q.Partition, st.q.Offset)
	cancel()
	if err != nil {
		st.trouble(ctx, "status", err)
		return false
	}
	return st.settle(ctx, status, snap, 0)
}

// trouble logs a failed Redis read (at debug: with Redis down every stream
// would say it) and tries again a little later.
func (st *stream) trouble(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	st.s.log.Debug("stream read", zap.String("what", what), zap.String("item", st.q.ItemID), zap.Error(err))
	st.arm(time.Second)
}

// settle acts on a status read from Redis; true ends the stream.
func (st *stream) settle(ctx context.Context, status line.Status, snap *Snapshot, depth int) bool {
	a := registration.AnswerOf(status, snap.Verdict, st.s.now())
	switch a.Status {
	case registration.StatusPending:
		if !st.pending {
			st.pending = true
			if st.send(EventPending, mustJSON(Terminal{Status: a.Status}), 0) != nil {
				return true
			}
		}
		if st.pendingWaits == nil {
			st.pendingWaits = retry.Policy{Initial: min(25*time.Millisecond, st.s.opt.PendingPoll), Max: st.s.opt.PendingPoll}.Waits()
		}
		st.arm(st.pendingWaits.NextBackOff())
		return false
	case registration.StatusPreQueue:
		if d := a.DrawAt.UnixMilli(); d != st.drawAt {
			st.drawAt = d
			if st.send(EventPreQueue, mustJSON(PreQueue{Status: a.Status, DrawAt: d, InDraw: a.InDraw}), 0) != nil {
				return true
			}
		}
		st.arm(registration.PreQueuePollAfter(a.DrawAt, st.s.now()))
		return false
	case registration.StatusWaiting:
		st.pending, st.pendingWaits = false, nil
		st.tok = a.TokenID
		if st.pace.AdmittedLastMinute == 0 {
			st.pace = registration.PaceOf(status)
		}
		return st.exactOr(ctx, snap, 0, depth)
	case registration.StatusAdmitted:
		st.tok = a.TokenID
		return st.admitted(a.ExpiresAt, snap.At)
	default:
		// A final state is told once and never taken back: confirm first
		// that the view it was read from is still the trusted one (a
		// Redis failed over to a replica that missed writes reads a place
		// as never made). If not, the stream ends without it: the client
		// reconnects and is told VIEW_REBUILDING until the view is back.
		if err := st.s.view.ConfirmItem(ctx, st.q.ItemID); err != nil {
			st.s.log.Info("a final state read from a view no longer confirmed: the stream ends without it",
				zap.String("item", st.q.ItemID), zap.String("status", a.Status), zap.Error(err))
			return true
		}
		return st.final(a.Status)
	}
}

// exact reads the registration's exact place and reports the position (at:
// the admission event that led here, 0: none); true ends the stream.
func (st *stream) exact(ctx context.Context, snap *Snapshot, at int64) bool {
	return st.exactOr(ctx, snap, at, 0)
}

func (st *stream) exactOr(ctx context.Context, snap *Snapshot, at int64, depth int) bool {
	p, waiting, err := st.s.places.Place(ctx, st.q.ItemID, st.tok)
	if err != nil {
		st.trouble(ctx, "place", err)
		return false
	}
	if !waiting { // admitted or gone since the status read: read it again
		if depth >= 2 {
			st.arm(100 * time.Millisecond)
			return false
		}
		rctx, cancel := context.WithTimeout(ctx, st.s.opt.ReadTimeout)
		status, err := st.s.line.Status(rctx, st.q.ItemID, st.q.PlaceKey(), st.q.TokenID, st.q.Partition, st.q.Offset)
		cancel()
		if err != nil {
			st.trouble(ctx, "status", err)
			return false
		}
		return st.settle(ctx, status, snap, depth+1)
	}
	now := st.s.now()
	if st.seq == 0 && st.progress > 0 && st.progress < p.Seq {
		st.ceiling = p.Seq - st.progress // what Last-Event-ID says this client saw
	}
	st.seq, st.refHead, st.refPos = p.Seq, p.Head, p.Position
	st.cur = ""
	if st.tok == st.q.TokenID { // a repeat registration's line token is not the one presented: no cursor
		st.cur = st.s.issueCursor(st.q.ItemID, st.tok, cursor{seq: p.Seq, refHead: p.Head, refPos: p.Position})
	}
	st.total, st.totalAt, st.pace = p.Total, now.UnixMilli(), registration.PaceOfPlace(p)
	st.lastRead = now.UnixNano()
	st.nextRead = now.Add(jitter(st.s.opt.Refresh)).UnixNano()
	return st.position(snap, at)
}

// onSnapshot acts on a newer snapshot of the item; true ends the stream.
func (st *stream) onSnapshot(ctx context.Context, snap *Snapshot) bool {
	if snap.Version > st.version+1 {
		st.s.m.replaced.Add(float64(snap.Version - st.version - 1))
	}
	st.version = snap.Version
	if st.notify(snap) {
		return true
	}
	if st.seq == 0 || st.pending { // not in the line yet: the poll decides
		if snap.Verdict != registration.Open {
			return st.full(ctx, snap)
		}
		return false
	}
	switch snap.Verdict {
	case registration.Closed:
		return st.final(registration.StatusClosed)
	case registration.SoldOut:
		return st.final(registration.StatusSoldOut)
	}
	if snap.Head >= st.seq {
		// The head passed this registration: admitted, unless it left.
		rctx, cancel := context.WithTimeout(ctx, st.s.opt.ReadTimeout)
		until, ok, err := st.s.line.AdmittedUntil(rctx, st.q.ItemID, st.tok)
		cancel()
		if err != nil {
			st.trouble(ctx, "admission", err)
			return false
		}
		if ok {
			return st.admitted(until, snap.At)
		}
		return st.full(ctx, snap)
	}
	if snap.At > st.totalAt {
		st.total, st.totalAt = snap.Waiting, snap.At
	}
	// The estimate goes out first; an exact read, when due, follows it, so
	// Redis never sits between an admission event and the streams.
	if st.position(snap, snap.At) {
		return true
	}
	if st.s.opt.Refresh > 0 {
		now := st.s.now()
		n := now.UnixNano()
		switch {
		case time.Duration(n-st.nextRead) > st.s.opt.Refresh:
			// Events resume after a quiet spell: every stream is overdue, so
			// spread the reads over the next period instead of all at once.
			st.nextRead = n + int64(rand.N(st.s.opt.Refresh))
		case n >= st.nextRead && !st.s.reads.AllowN(now, 1):
			st.nextRead = n + int64(rand.N(st.s.opt.Refresh)) // over budget: later
		case n >= st.nextRead:
			return st.exact(ctx, snap, 0)
		}
	}
	return false
}

// position reports the position if it changed. at is the admission event
// that caused it (0: none), for the latency histogram.
func (st *stream) position(snap *Snapshot, at int64) bool {
	pos := registration.Position(st.seq, st.refHead, st.refPos, snap.Head)
	if st.total > 0 {
		pos = min(pos, st.total) // a waiting registration is within the line
	}
	if st.ceiling > 0 {
		pos = min(pos, st.ceiling)
	}
	pos = max(pos, 1)
	eta := st.eta(pos)
	if st.sentPos > 0 && pos == st.sentPos && st.total == st.sentTot && eta == st.sentEta {
		return false
	}
	// Paced from when the wave woke this stream, when it did: a wave wakes a
	// slice's streams together and they run a few ms apart, in another order
	// each time; the waves keep a slice's wakes an interval apart (waves.gap).
	now := st.s.now().UnixNano()
	if st.wokeAt != 0 {
		now = st.wokeAt
	}
	if every, since := st.s.opt.PositionEvery, time.Duration(now-st.sentAt); st.sentPos > 0 && every > 0 && since < every {
		if !st.holding { // the latest state goes out when the interval ends
			st.holding = true
			if st.held == nil {
				st.held = time.NewTimer(every - since)
			} else {
				st.held.Reset(every - since)
			}
		}
		return false
	}
	st.sentAt = now
	st.ceiling, st.sentPos, st.sentTot, st.sentEta = pos, pos, st.total, eta
	st.progress = max(st.progress, st.seq-pos)
	bp := bufs.Get().(*[]byte)
	b := append((*bp)[:0], `{"position":`...)
	b = strconv.AppendInt(b, pos, 10)
	b = append(b, `,"waitingTotal":`...)
	b = strconv.AppendInt(b, max(st.total, pos), 10)
	if eta >= 0 {
		b = append(b, `,"etaSeconds":`...)
		b = strconv.AppendInt(b, eta, 10)
	}
	b = append(b, '}')
	err := st.send(EventPosition, b, at)
	*bp = b
	bufs.Put(bp)
	return err != nil
}

// eta is registration.ETA at pos; -1: none (paused, closed).
func (st *stream) eta(pos int64) int64 {
	it, known := topics.ItemState{Enabled: true, Stock: topics.Unlimited}, true
	if st.s.items != nil {
		it, known = st.s.items.Get(st.q.ItemID)
	}
	secs, ok := registration.ETA(pos, st.pace, it, known, st.s.now())
	if !ok {
		return -1
	}
	return secs
}

// admitted sends the admission token (or "expired" when its time is past);
// the stream ends either way.
func (st *stream) admitted(until time.Time, at int64) bool {
	if !until.After(st.s.now()) {
		return st.final(registration.StatusExpired)
	}
	raw, err := st.s.admit.IssueAdmission(token.Admission{TokenID: st.tok, ItemID: st.q.ItemID, UserID: st.q.UserID, Holder: st.q.Holder, ExpiresAt: until})
	if err != nil {
		st.s.log.Error("sign admission token", zap.Error(err))
		return true // the client reconnects and tries again
	}
	st.progress = max(st.progress, st.seq)
	st.cur = "" // nothing to resume once admitted
	_ = st.send(EventAdmitted, mustJSON(Admitted{AdmissionToken: raw, ExpiresAt: until.UTC().Format(time.RFC3339Nano)}), at)
	return true
}

// notify sends the item's notice when it differs from the one sent last;
// true ends the stream (the client is gone).
func (st *stream) notify(snap *Snapshot) bool {
	if snap.Notice == st.notice {
		return false
	}
	st.notice = snap.Notice
	return st.send(EventNotice, mustJSON(Notice{Notice: snap.Notice}), 0) != nil
}

// final sends the terminal event of status; the stream ends.
func (st *stream) final(status string) bool {
	st.cur = ""
	t := Terminal{Status: status}
	if status == registration.StatusRejected {
		t.Message = st.s.hub.rejectMessage(st.q.ItemID)
	}
	_ = st.send(eventOf[status], mustJSON(t), 0)
	return true
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // unreachable: plain structs of strings and numbers
	}
	return b
}

// jitter spreads d by ±25% so streams that connected together do not all
// read Redis on the same event.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d*3/4 + rand.N(d/2+1)
}
