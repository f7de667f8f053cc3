package token

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A status poller sends the same queue token every few seconds, and each
// time ParseQueue decoded it, scanned its claims and computed its HMAC
// (about 1.5 µs, 6% of a status read's CPU in the api). RememberVerified
// keeps what a token said once it was verified in full, keyed by the token
// itself: a later ParseQueue of exactly the same string answers from memory
// after the checks that depend on the time (expiry, issued-at, with the same
// leeway), which are made at every read as before. Only a string equal byte
// for byte to one that passed every check is answered this way, so the
// tokens accepted are exactly those the full parse accepts.

// verified is the remembered tokens, in shards keyed by the signature part
// (the map hashes ~43 bytes, not the whole token); an entry holds the whole
// token to compare. An entry is never written once stored, so a reader
// copies its pointer under the lock.
type verified struct {
	seed   maphash.Seed
	max    int // per shard; a full shard forgets half of what it holds
	shards [16]verifiedShard
}

type verifiedShard struct {
	mu sync.Mutex
	m  map[string]*verifiedEntry // by the token's signature part, a substring of raw
}

type verifiedEntry struct {
	raw  string
	q    Queue
	slot Slot
}

// Slot is where a caller keeps its own record of one remembered token (the
// api: the token's status bucket and place), found with the token by the one
// look-up that verifies it. It lives as long as the token is remembered, and
// only a read of exactly that token, within its expiry, hands it out. Safe
// for concurrent use.
type Slot struct{ v atomic.Value }

// Load is what was stored in s last (nil: nothing yet).
func (s *Slot) Load() any { return s.v.Load() }

// Store keeps v in s; every v stored in one slot must be of one type.
func (s *Slot) Store(v any) { s.v.Store(v) }

// RememberVerified makes s remember up to n queue tokens that passed
// ParseQueue in full (about 0.6 KiB each), and answer them again without the
// signature check and decoding: see verified. It returns s.
func (s *Signer) RememberVerified(n int) *Signer {
	v := &verified{seed: maphash.MakeSeed(), max: max(n/16, 1)}
	for i := range v.shards {
		v.shards[i].m = map[string]*verifiedEntry{}
	}
	s.seen = v
	return s
}

// sigOf is raw's signature part ("" when raw has no dot).
func sigOf(raw string) string {
	i := strings.LastIndexByte(raw, '.')
	if i < 0 {
		return ""
	}
	return raw[i+1:]
}

func (v *verified) shard(sig string) *verifiedShard {
	return &v.shards[maphash.String(v.seed, sig)%uint64(len(v.shards))]
}

// get returns raw's entry (what it said, and its slot) when raw was verified
// before and, at now, is still within its expiry and past its issued-at (the
// leeway of the full parse); else false, and the full parse decides.
func (v *verified) get(raw string, now time.Time) (*verifiedEntry, bool) {
	sig := sigOf(raw)
	if sig == "" {
		return nil, false
	}
	sh := v.shard(sig)
	sh.mu.Lock()
	e := sh.m[sig]
	sh.mu.Unlock()
	if e == nil || e.raw != raw {
		return nil, false
	}
	if !now.Before(e.q.ExpiresAt.Add(leeway)) || !e.q.IssuedAt.IsZero() && now.Before(e.q.IssuedAt.Add(-leeway)) {
		return nil, false
	}
	return e, true
}

// put remembers q, what raw said once it passed every check, and returns
// its entry (nil: raw has no signature part).
func (v *verified) put(raw string, q Queue) *verifiedEntry {
	raw = strings.Clone(raw) // raw is a piece of the request's URL or header
	sig := sigOf(raw)
	if sig == "" {
		return nil
	}
	sh := v.shard(sig)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.m) >= v.max {
		n := len(sh.m) / 2
		for k := range sh.m { // map order: an arbitrary half
			if n == 0 {
				break
			}
			delete(sh.m, k)
			n--
		}
	}
	e := &verifiedEntry{raw: raw, q: q}
	sh.m[sig] = e
	return e
}
