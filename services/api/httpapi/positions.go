package httpapi

import (
	"context"
	"hash/maphash"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/token"
)

// positions answers repeated status reads of waiting registrations from
// memory: the first read of a token is exact (it carries the token's seq and
// the item's head), and later ones take the item's head and counts, read at
// most once per fresh interval per item and shared by every token of the
// item, and move the exact answer by how far the head moved
// (registration.Moved). A token is read exactly again after exactEvery (less
// up to a quarter, drawn per exact read, so tokens first read together are
// not all read again in the same moment), when the head reaches it, and
// whenever the view's generation changed. So a steady poller costs Redis
// about two item reads per fresh interval, not a read per poll.
//
// An estimate is off by the holes the head passed (registration.Position):
// it may tell less than an exact read later finds. So a token is never told
// more than this replica told it last from the same generation (posEntry.told);
// across replicas the client's status cursor does the same (told.go).
//
// An entry read exactly exactEvery ago or more answers nothing any more (the
// next read is exact), so a shard drops those whenever it has doubled since
// it last did (as memBuckets): it holds about twice the tokens read exactly
// within exactEvery, not every token served up to max.
//
// When the throttle keeps the status bucket in memory (useBucket), a token's
// bucket is kept here too, in the same record (tokenRec) as its exact read: a
// status read then finds both with one look-up, under one lock (takeStatus),
// instead of one sharded map for each. A record is dropped by the sweeps once
// both are as good as none (the bucket full again, the read stale).
//
// A token the signer remembers as verified (token.Slot) keeps its record in
// its slot: a repeat read of exactly that token then finds the record
// without a look-up of its own (lockSlotRec), the one look-up being the
// signer's, which checks the raw bytes and the expiry.
type positions struct {
	line       Line
	view       *view.Watcher
	fresh      time.Duration
	exactEvery time.Duration
	max        int           // tokens kept; a full shard forgets half of what it holds
	timeout    time.Duration // bounds a read of an item's motion (the status timeout)
	now        func() time.Time
	seed       maphash.Seed
	shards     [64]posShard
	// bucket is the status bucket's rate and burst when kept in the
	// records (useBucket); nil: the throttle keeps it, if any.
	bucket *memBuckets

	// items are the items' motions, a map copied on the rare insert (items
	// are few: the item cache's), so a read looks its item up without a lock.
	mu    sync.Mutex
	items atomic.Pointer[map[string]*motion]
}

// posShard holds its tokens' records by pointer: an entry's fields but told
// are never written once stored (remember and left store a new one in the
// record), so a reader copies the entry's pointer under the lock and reads
// the entry after it, and the map's lookup is the fast one for string keys (a
// value over 128 bytes takes the generic path and is copied out on every read).
type posShard struct {
	mu sync.Mutex
	m  map[string]*tokenRec
	// sweepAt is the size at which the shard next drops its stale entries.
	sweepAt int
	owner   *positions // servers that share a signer share its slots
}

// tokenRec is what this replica keeps of one token (by item and tokenId):
// its last exact read and its status bucket, both guarded by the shard's lock.
type tokenRec struct {
	pos    *posEntry // nil: none
	bucket memBucket // zero: full; used only when positions.bucket is set
	sh     *posShard // the shard whose map holds it
	// gone: sh's map holds it no more (dropped by a sweep or remember), so a
	// slot still holding it is looked up again, never answered from.
	gone bool
}

// posEntry is a registration's last exact read, kept by item and tokenId:
// a token answers for its own place only (a repeat registration's token never
// reads another token's place), so a leave forgets its own token's entry.
type posEntry struct {
	exact line.Status
	at    time.Time
	gen   view.ItemGen
	// told is the smallest position told from this exact read on, carried
	// over by the next exact read of the same generation (0: none). It is
	// lowered in place (tell): a read takes the shard's lock once.
	told atomic.Int64
	// early is how much sooner than the item's exactEvery this entry is read
	// exactly again, in 1/1024ths of it (below 256: up to a quarter).
	early uint8
	// left: the token's place was left through this replica at at; until exactEvery
	// later every read is exact (the leave may not be applied yet, and an
	// exact read before it is must not be remembered).
	left bool
}

// motion is an item's last Motion read and the read in flight, if any. The
// readers of one item share one read at a time (next), and while the last
// read is fresh they answer from it without waiting for the next. A fresh
// answer takes no lock (last, reading): every status read of an item passes
// here, and a lock they all take stalls them all whenever the kernel
// deschedules its holder. mu guards next, never a Redis read.
type motion struct {
	last    atomic.Pointer[motionSnap] // the last good read; nil: none, or it failed
	reading atomic.Bool                // next is set
	refresh atomic.Bool                // next was started while last was fresh: past fresh, it is late
	mu      sync.Mutex
	next    *motionRead
}

// motionSnap is one Motion read, never written once stored: at is when it
// returned, sent when it was sent (the line it tells is no older).
type motionSnap struct {
	m        line.Motion
	at, sent time.Time
	gen      view.ItemGen
}

// motionRead is one Motion read shared by the readers that wait for it
// (done closed once m and err are set).
type motionRead struct {
	done chan struct{}
	gen  view.ItemGen
	m    line.Motion
	err  error
}

func newPositions(line Line, w *view.Watcher, fresh, exactEvery time.Duration, max int, timeout time.Duration) *positions {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	p := &positions{line: line, view: w, fresh: fresh, exactEvery: exactEvery, max: max, timeout: timeout, now: time.Now,
		seed: maphash.MakeSeed()}
	p.items.Store(&map[string]*motion{})
	for i := range p.shards {
		p.shards[i].m = map[string]*tokenRec{}
		p.shards[i].sweepAt = minSweep
		p.shards[i].owner = p
	}
	return p
}

// makeRoom makes room in sh for one more record at now, with sh.mu held: an
// entry read exactEvery ago or more is never answered from, nor keeps a
// leave's reads exact, and a full bucket is the same as a new one: a record
// of both is as good as none (makeRoom in membuckets.go).
func (p *positions) makeRoom(sh *posShard, now time.Time) {
	makeRoom(sh.m, &sh.sweepAt, p.max/len(p.shards)+1, func(r *tokenRec) bool {
		return (r.pos == nil || now.Sub(r.pos.at) >= p.exactEvery) &&
			(p.bucket == nil || r.bucket.full(now, p.bucket.rate, p.bucket.burst))
	}, dropRec)
}

// dropRec marks r, just deleted from its shard's map, gone, and lets its
// read go (a slot may keep r until its token is forgotten); sh.mu held.
func dropRec(r *tokenRec) { r.gone, r.pos = true, nil }

// useBucket keeps the status bucket of rate and burst (b's: the throttle's
// in memory) in the tokens' records; takeStatus takes from it.
func (p *positions) useBucket(b *memBuckets) { p.bucket = b }

// record is key's record in sh, made (making room) when it has none, with
// sh.mu held.
func (p *positions) record(sh *posShard, key []byte, now time.Time) *tokenRec {
	r := sh.m[string(key)]
	if r == nil {
		p.makeRoom(sh, now)
		r = &tokenRec{sh: sh}
		sh.m[string(key)] = r
	}
	return r
}

// posLook is a token's exact read found by takeStatus (e nil: none), which
// status then uses instead of a look-up of its own (looked false: none made,
// and slot, when not nil, is the token's: see lockSlotRec).
type posLook struct {
	e      *posEntry
	looked bool
	slot   *token.Slot
}

// takeStatus takes one from item's tokenID's status bucket (useBucket) and
// returns, from the same look-up, its last exact read for status; when the
// bucket is empty, ok is false with how long until it is not. slot, when not
// nil, is the token's (token.Signer.ParseQueueSlot, for this item and
// tokenID): its record is taken from there when it holds one, else kept
// there.
func (p *positions) takeStatus(item, tokenID string, slot *token.Slot) (ok bool, wait time.Duration, look posLook) {
	now := p.now()
	r := p.lockRec(item, tokenID, slot, now, true)
	ok, wait = r.bucket.take(now, p.bucket.rate, p.bucket.burst)
	e := r.pos
	r.sh.mu.Unlock()
	return ok, wait, posLook{e: e, looked: true}
}

// lockRec is item's tokenID's record with its shard's lock held, taken from
// slot when it holds it (lockSlotRec), else looked up and kept in slot; a
// record missing is made when create is set (nil, no lock held: not made).
func (p *positions) lockRec(item, tokenID string, slot *token.Slot, now time.Time, create bool) *tokenRec {
	if r := p.lockSlotRec(slot); r != nil {
		return r
	}
	var kb [128]byte
	key := posKey(kb[:0], item, tokenID)
	sh := p.shard(key)
	sh.mu.Lock()
	var r *tokenRec
	if create {
		r = p.record(sh, key, now)
	} else if r = sh.m[string(key)]; r == nil {
		sh.mu.Unlock()
		return nil
	}
	if slot != nil {
		slot.Store(r)
	}
	return r
}

// lockSlotRec is the record slot holds, with its shard's lock held, when it
// is one of p's and its shard's map still holds it; nil (no lock held):
// look it up. A slot is handed out only for the exact raw token the signer
// verified, within its expiry, and it holds only the record of that token's
// item and tokenId (takeStatus, peek), so the record found is the one a
// look-up would find.
func (p *positions) lockSlotRec(slot *token.Slot) *tokenRec {
	if slot == nil {
		return nil
	}
	r, _ := slot.Load().(*tokenRec)
	if r == nil || r.sh.owner != p {
		return nil
	}
	r.sh.mu.Lock()
	if r.gone {
		r.sh.mu.Unlock()
		return nil
	}
	return r
}

// peek is item's tokenID's last exact read (nil: none), found from slot as
// in takeStatus, without making a record.
func (p *positions) peek(item, tokenID string, slot *token.Slot) *posEntry {
	r := p.lockRec(item, tokenID, slot, time.Time{}, false)
	if r == nil {
		return nil
	}
	e := r.pos
	r.sh.mu.Unlock()
	return e
}

// gen names the incarnation of item's line the answers come from: the
// view's generation and the item's token ("" without a watcher), so an
// answer remembered before the item's node was lost and the item rebuilt is
// never told after.
func (p *positions) gen(item string) view.ItemGen {
	if p.view == nil {
		return view.ItemGen{}
	}
	return p.view.ItemGen(item)
}

func (p *positions) shard(key []byte) *posShard {
	return &p.shards[maphash.Bytes(p.seed, key)%uint64(len(p.shards))]
}

// posKey appends item's and tokenID's entry key to b. A read looks the
// entry up as sh.m[string(key)], which makes no string.
func posKey(b []byte, item, tokenID string) []byte {
	b = append(b, item...)
	b = append(b, 0)
	return append(b, tokenID...)
}

// status answers from memory when it can (ok), else the caller reads exactly
// and calls remember. gen is the item's generation now (p.gen, read once by
// the caller); every, when positive and shorter, replaces exactEvery for this
// item (see exactEveryOf: items that release idle places). look, when
// looked, is the token's entry takeStatus found, used instead of a look-up.
func (p *positions) status(ctx context.Context, item, tokenID string, gen view.ItemGen, every time.Duration, look posLook) (line.Status, bool) {
	if every <= 0 || every > p.exactEvery {
		every = p.exactEvery
	}
	e := look.e
	if !look.looked {
		e = p.peek(item, tokenID, look.slot)
	}
	now := p.now()
	if e == nil || e.left || e.gen != gen || now.Sub(e.at) >= every-every*time.Duration(e.early)/1024 {
		return line.Status{}, false
	}
	m, ok := p.motion(ctx, item, gen, now)
	if !ok {
		return line.Status{}, false
	}
	st, ok := registration.Moved(e.exact, m)
	if !ok {
		return line.Status{}, false
	}
	st.Position = e.tell(st.Position)
	return st, true
}

// tell is the position to tell for pos, computed from e: the smallest told
// from e so far, which pos lowers. A read racing remember's replacement of e
// lowers e, which nobody reads again: the new entry starts from what it
// carried over (the client's cursor bounds the answers across that race, as
// across replicas).
func (e *posEntry) tell(pos int64) int64 {
	for {
		told := e.told.Load()
		if told > 0 && told <= pos {
			return told
		}
		if e.told.CompareAndSwap(told, pos) {
			return pos
		}
	}
}

// motion is item's Motion read at most fresh ago from view generation gen.
// Once half of fresh has passed, the first reader starts the next read in
// the background and answers from the last one: a steady stream of readers
// never waits for Redis. Past fresh, readers wait for one shared read (the
// first of them starts it), unless that background read is still under way
// (late: a Redis held by a long command holds it): then they answer from the
// last one until fresh+timeout after it was sent (late), so a stall of Redis
// does not stall the readers whose answer it cannot change.
func (p *positions) motion(ctx context.Context, item string, gen view.ItemGen, now time.Time) (line.Motion, bool) {
	mo := p.itemMotion(item)
	if l := mo.last.Load(); l != nil && l.gen == gen && (now.Sub(l.at) < p.fresh/2 || mo.reading.Load() && now.Sub(l.at) < p.fresh || mo.refresh.Load() && p.late(l, now)) {
		return l.m, true // fresh, and the next read is not due or under way; or it is late
	}
	mo.mu.Lock()
	if l := mo.last.Load(); l != nil && l.gen == gen && (now.Sub(l.at) < p.fresh || mo.next != nil && mo.refresh.Load() && p.late(l, now)) {
		if mo.next == nil && now.Sub(l.at) >= p.fresh/2 {
			r := startRead(mo, gen)
			mo.refresh.Store(true)
			go p.read(ctx, mo, r, item)
		}
		mo.mu.Unlock()
		return l.m, true
	}
	r := mo.next
	lead := r == nil
	if lead {
		r = startRead(mo, gen)
	}
	mo.mu.Unlock()
	if lead {
		p.read(ctx, mo, r, item)
	} else {
		select {
		case <-r.done:
		case <-ctx.Done():
			return line.Motion{}, false
		}
	}
	if r.err != nil || r.gen != gen {
		return line.Motion{}, false
	}
	return r.m, true
}

// late reports whether l may still answer, past fresh, while the next read,
// started in the background before l was stale, is under way: until
// fresh+timeout after l was sent. (A read started past fresh, of an item
// read rarely, is waited for as before.) A read that took up to timeout
// (the longest one may) is answered from until fresh after it returned, so
// an answer never tells a line older than it could before; and while Redis
// is held by one command, nothing else changes the line, so the waiting
// readers would get what l tells plus that command's change, told here too
// once the read behind it returns.
func (p *positions) late(l *motionSnap, now time.Time) bool {
	return now.Sub(l.sent) < p.fresh+p.timeout
}

// itemMotion is item's motion, made on its first read.
func (p *positions) itemMotion(item string) *motion {
	if mo := (*p.items.Load())[item]; mo != nil {
		return mo
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.items.Load()
	if mo := old[item]; mo != nil {
		return mo
	}
	next := make(map[string]*motion, len(old)+1)
	maps.Copy(next, old)
	mo := &motion{}
	next[item] = mo
	p.items.Store(&next)
	return mo
}

// startRead makes mo's next read, with mo.mu held.
func startRead(mo *motion, gen view.ItemGen) *motionRead {
	r := &motionRead{done: make(chan struct{}), gen: gen}
	mo.next = r
	mo.reading.Store(true)
	return r
}

// read reads item's Motion for r and keeps it in mo. The read is shared, so
// the caller's cancel does not cut it; StatusTimeout bounds it.
func (p *positions) read(ctx context.Context, mo *motion, r *motionRead, item string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
	sent := p.now()
	r.m, r.err = p.line.Motion(ctx, item) // confirmed against the view (viewLine)
	cancel()
	mo.mu.Lock()
	mo.next = nil
	if r.err != nil {
		mo.last.Store(nil)
	} else {
		mo.last.Store(&motionSnap{m: r.m, at: p.now(), sent: sent, gen: r.gen})
	}
	mo.reading.Store(false)
	mo.refresh.Store(false)
	mo.mu.Unlock()
	close(r.done)
}

// remember keeps an exact waiting answer read from view generation gen (taken
// before the read, so a rebuild racing it is never remembered as the new one),
// and returns the position to tell: the exact one, or the smaller one told
// before from the same generation.
func (p *positions) remember(item, tokenID string, st line.Status, gen view.ItemGen) int64 {
	key := posKey(nil, item, tokenID)
	sh := p.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := p.now()
	r := sh.m[string(key)]
	var e *posEntry
	if r != nil {
		e = r.pos
	}
	if e != nil && e.left && now.Sub(e.at) < p.exactEvery {
		return st.Position
	}
	if st.State != line.Waiting || st.Seq <= 0 {
		if r != nil && (p.bucket == nil || r.bucket.full(now, p.bucket.rate, p.bucket.burst)) {
			delete(sh.m, string(key))
			dropRec(r)
		} else if r != nil {
			r.pos = nil // its bucket stays until a sweep finds it full
		}
		return st.Position
	}
	told := st.Position
	if e != nil && !e.left && e.gen == gen {
		if t := e.told.Load(); t > 0 {
			told = min(told, t)
		}
	}
	if r == nil {
		r = p.record(sh, key, now)
	}
	n := &posEntry{exact: st, at: now, gen: gen, early: uint8(rand.IntN(256))}
	n.told.Store(told)
	r.pos = n
	return told
}

// left forgets a token's answer: its place was left through this replica, and
// its reads are exact for the next exactEvery.
func (p *positions) left(item, tokenID string) {
	key := posKey(nil, item, tokenID)
	sh := p.shard(key)
	now := p.now()
	sh.mu.Lock()
	p.record(sh, key, now).pos = &posEntry{left: true, at: now}
	sh.mu.Unlock()
}
