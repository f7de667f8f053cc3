package httpapi

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// positions answers repeated status reads of waiting registrations from
// memory: the first read of a token is exact (it carries the token's seq and
// the item's head), and later ones take the item's head and counts, read at
// most once per fresh interval per item and shared by every token of the
// item, and move the exact answer by how far the head moved
// (registration.Moved). A token is read exactly again after exactEvery, when
// the head reaches it, and whenever the view's generation changed. So a
// steady poller costs Redis about one item read per fresh interval, not a
// read per poll.
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

	mu    sync.Mutex
	items map[string]*motion
}

type posShard struct {
	mu sync.Mutex
	m  map[string]posEntry
}

// posEntry is a registration's last exact read, kept by item and tokenId:
// a token answers for its own place only (a repeat registration's token never
// reads another token's place), so a leave forgets its own token's entry.
type posEntry struct {
	exact queue.Status
	at    time.Time
	gen   string
	// left: the token's place was left through this replica at at; until exactEvery
	// later every read is exact (the leave may not be applied yet, and an
	// exact read before it is must not be remembered).
	left bool
}

// motion is an item's last Motion read; mu is held while it is read again,
// so the readers of one item make one Redis read at a time.
type motion struct {
	mu  sync.Mutex
	m   queue.Motion
	at  time.Time
	gen string
}

func newPositions(line Line, w *view.Watcher, fresh, exactEvery time.Duration, max int, timeout time.Duration) *positions {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	p := &positions{line: line, view: w, fresh: fresh, exactEvery: exactEvery, max: max, timeout: timeout, now: time.Now,
		seed: maphash.MakeSeed(), items: map[string]*motion{}}
	for i := range p.shards {
		p.shards[i].m = map[string]posEntry{}
	}
	return p
}

// gen names the incarnation of item's line the answers come from: the
// view's generation and the item's token ("" without a watcher), so an
// answer remembered before the item's node was lost and the item rebuilt is
// never told after.
func (p *positions) gen(item string) string {
	if p.view == nil {
		return ""
	}
	return p.view.ItemGen(item)
}

func (p *positions) shard(key string) *posShard {
	return &p.shards[maphash.String(p.seed, key)%uint64(len(p.shards))]
}

func posKey(item, tokenID string) string { return item + "\x00" + tokenID }

// status answers from memory when it can (ok), else the caller reads exactly
// and calls remember. every, when positive and shorter, replaces exactEvery
// for this item (see Server.exactEvery: items that release idle places).
func (p *positions) status(ctx context.Context, item, tokenID string, every time.Duration) (queue.Status, bool) {
	if every <= 0 || every > p.exactEvery {
		every = p.exactEvery
	}
	key := posKey(item, tokenID)
	sh := p.shard(key)
	sh.mu.Lock()
	e, found := sh.m[key]
	sh.mu.Unlock()
	now := p.now()
	gen := p.gen(item)
	if !found || e.left || e.gen != gen || now.Sub(e.at) >= every {
		return queue.Status{}, false
	}
	m, ok := p.motion(ctx, item, gen, now)
	if !ok {
		return queue.Status{}, false
	}
	return registration.Moved(e.exact, m)
}

// motion is item's Motion read at most fresh ago from view generation gen.
func (p *positions) motion(ctx context.Context, item, gen string, now time.Time) (queue.Motion, bool) {
	p.mu.Lock()
	mo := p.items[item]
	if mo == nil {
		mo = &motion{}
		p.items[item] = mo // items are few: the item cache's
	}
	p.mu.Unlock()
	mo.mu.Lock()
	defer mo.mu.Unlock()
	if mo.gen == gen && !mo.at.IsZero() && now.Sub(mo.at) < p.fresh {
		return mo.m, true
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	m, err := p.line.Motion(ctx, item) // confirmed against the view (viewLine)
	if err != nil {
		mo.at = time.Time{}
		return queue.Motion{}, false
	}
	mo.m, mo.at, mo.gen = m, p.now(), gen
	return m, true
}

// remember keeps an exact waiting answer read from view generation gen (taken
// before the read, so a rebuild racing it is never remembered as the new one).
func (p *positions) remember(item, tokenID string, st queue.Status, gen string) {
	key := posKey(item, tokenID)
	sh := p.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.m[key]; ok && e.left && p.now().Sub(e.at) < p.exactEvery {
		return
	}
	if st.State != queue.Waiting || st.Seq <= 0 {
		delete(sh.m, key)
		return
	}
	if len(sh.m) >= p.max/len(p.shards)+1 {
		forgetHalf(sh.m)
	}
	sh.m[key] = posEntry{exact: st, at: p.now(), gen: gen}
}

// left forgets a token's answer: its place was left through this replica, and
// its reads are exact for the next exactEvery.
func (p *positions) left(item, tokenID string) {
	key := posKey(item, tokenID)
	sh := p.shard(key)
	sh.mu.Lock()
	sh.m[key] = posEntry{left: true, at: p.now()}
	sh.mu.Unlock()
}
