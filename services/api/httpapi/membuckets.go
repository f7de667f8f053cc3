package httpapi

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
)

// memBuckets are token buckets kept in this replica's memory, for the calls
// that write nothing to the record (status reads): a token's reads then cost
// no Redis round trip (the api answers most of them from memory), and a token
// spread over n replicas gets at most n buckets' worth.
//
// A bucket that has refilled to its burst is the same as no bucket (a new one
// starts full), so a shard drops its full buckets whenever it has doubled
// since it last did: it holds about twice the tokens that called within
// burst/rate (2 s by default), not every token ever served, and each
// sweep's cost is paid by the inserts that doubled it. Bounded besides: a
// shard that is still full forgets a random half of its buckets (a forgotten
// bucket starts full again, which only ever lets more through).
type memBuckets struct {
	rate, burst float64 // tokens a second, and the most a bucket holds
	perShard    int
	seed        maphash.Seed
	shards      [64]memShard
}

// memShard holds its buckets by pointer: a read takes its token in place,
// so only a new bucket writes the map (hashing the key a second time).
type memShard struct {
	mu sync.Mutex
	m  map[string]*memBucket
	// sweepAt is the size at which the shard next drops its full buckets.
	sweepAt int
}

// minSweep is the smallest size at which a shard drops its full buckets.
const minSweep = 64

type memBucket struct {
	tokens float64
	at     time.Time
}

// maxMemBuckets bounds the buckets one replica keeps (about 100 bytes each).
const maxMemBuckets = 1_000_000

func newMemBuckets(l redis_rate.Limit, max int) *memBuckets {
	b := &memBuckets{rate: float64(l.Rate) / l.Period.Seconds(), burst: float64(l.Burst), perShard: max/64 + 1, seed: maphash.MakeSeed()}
	for i := range b.shards {
		b.shards[i].m = map[string]*memBucket{}
		b.shards[i].sweepAt = minSweep
	}
	return b
}

// makeRoom makes room in a shard for one more entry: once m has reached
// *sweepAt it drops the entries gone says answer nothing any more and sets
// *sweepAt to twice what is left (each sweep's cost paid by the inserts that
// doubled the shard); a shard still at limit then forgets half of what it
// holds. dropped, when not nil, is told of each entry deleted. memBuckets and
// positions each keep their shards this way.
func makeRoom[K comparable, V any](m map[K]V, sweepAt *int, limit int, gone func(V) bool, dropped func(V)) {
	if len(m) >= *sweepAt {
		for k, v := range m {
			if gone(v) {
				delete(m, k)
				if dropped != nil {
					dropped(v)
				}
			}
		}
		*sweepAt = max(2*len(m), minSweep)
	}
	if len(m) >= limit {
		forgetHalf(m, dropped)
	}
}

// forgetHalf deletes a random half of m (map order is random), telling
// dropped (when not nil) of each: how a full shard of remembered answers or
// buckets makes room.
func forgetHalf[K comparable, V any](m map[K]V, dropped func(V)) {
	n := len(m) / 2
	for k, v := range m {
		if n == 0 {
			break
		}
		delete(m, k)
		if dropped != nil {
			dropped(v)
		}
		n--
	}
}

// allow takes a token from key's bucket at now; when it has none, it says
// how long until one is back.
func (b *memBuckets) allow(key string, now time.Time) (bool, time.Duration) {
	sh := &b.shards[maphash.String(b.seed, key)%uint64(len(b.shards))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[key]
	if e == nil {
		makeRoom(sh.m, &sh.sweepAt, b.perShard, func(e *memBucket) bool { // full again: as good as none
			return e.full(now, b.rate, b.burst)
		}, nil)
		e = &memBucket{tokens: b.burst, at: now}
		sh.m[key] = e
	}
	return e.take(now, b.rate, b.burst)
}

// take takes one token from e at now, refilled at rate a second up to burst
// since it was last taken (a zero e is full); when it has none, it says how
// long until one is back.
func (e *memBucket) take(now time.Time, rate, burst float64) (bool, time.Duration) {
	if e.at.IsZero() {
		e.tokens = burst
	} else if dt := now.Sub(e.at).Seconds(); dt > 0 {
		e.tokens = min(burst, e.tokens+dt*rate)
	}
	e.at = now
	if e.tokens >= 1 {
		e.tokens--
		return true, 0
	}
	return false, time.Duration((1 - e.tokens) / rate * float64(time.Second))
}

// full reports whether e has refilled to burst at now (a zero e is full): it
// is then the same as no bucket.
func (e *memBucket) full(now time.Time, rate, burst float64) bool {
	return e.at.IsZero() || e.tokens+now.Sub(e.at).Seconds()*rate >= burst
}
