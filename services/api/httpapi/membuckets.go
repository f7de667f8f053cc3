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
// spread over n replicas gets at most n buckets' worth. Bounded: a shard that
// is full forgets a random half of its buckets (a forgotten bucket starts
// full again, which only ever lets more through).
type memBuckets struct {
	rate, burst float64 // tokens a second, and the most a bucket holds
	perShard    int
	seed        maphash.Seed
	shards      [64]memShard
}

type memShard struct {
	mu sync.Mutex
	m  map[string]memBucket
}

type memBucket struct {
	tokens float64
	at     time.Time
}

// maxMemBuckets bounds the buckets one replica keeps (about 100 bytes each).
const maxMemBuckets = 1_000_000

func newMemBuckets(l redis_rate.Limit, max int) *memBuckets {
	b := &memBuckets{rate: float64(l.Rate) / l.Period.Seconds(), burst: float64(l.Burst), perShard: max/64 + 1, seed: maphash.MakeSeed()}
	for i := range b.shards {
		b.shards[i].m = map[string]memBucket{}
	}
	return b
}

// forgetHalf deletes a random half of m (map order is random): how a full
// shard of remembered answers or buckets makes room.
func forgetHalf[K comparable, V any](m map[K]V) {
	n := len(m) / 2
	for k := range m {
		if n == 0 {
			break
		}
		delete(m, k)
		n--
	}
}

// allow takes a token from key's bucket at now; when it has none, it says
// how long until one is back.
func (b *memBuckets) allow(key string, now time.Time) (bool, time.Duration) {
	sh := &b.shards[maphash.String(b.seed, key)%uint64(len(b.shards))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key]
	if !ok {
		if len(sh.m) >= b.perShard {
			forgetHalf(sh.m)
		}
		e = memBucket{tokens: b.burst, at: now}
	}
	if dt := now.Sub(e.at).Seconds(); dt > 0 {
		e.tokens = min(b.burst, e.tokens+dt*b.rate)
	}
	e.at = now
	if e.tokens >= 1 {
		e.tokens--
		sh.m[key] = e
		return true, 0
	}
	sh.m[key] = e
	return false, time.Duration((1 - e.tokens) / b.rate * float64(time.Second))
}
