package httpapi

import (
	"strconv"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
)

// A token's bucket holds its burst, refills at its rate, says when a token
// is back, and the buckets stay within their bound however many tokens call.
func TestMemBuckets(t *testing.T) {
	b := newMemBuckets(redis_rate.Limit{Rate: 5, Burst: 10, Period: time.Second}, 640)
	now := time.Unix(1_900_000_000, 0)
	for i := range 10 {
		if ok, _ := b.allow("a", now); !ok {
			t.Fatalf("call %d within the burst refused", i)
		}
	}
	ok, wait := b.allow("a", now)
	if ok || wait != 200*time.Millisecond {
		t.Fatalf("past the burst: %v, %s; want refused for 200ms", ok, wait)
	}
	if ok, _ := b.allow("b", now); !ok {
		t.Fatal("another token is not held back")
	}
	if ok, _ := b.allow("a", now.Add(200*time.Millisecond)); !ok {
		t.Fatal("a token is back after 1/rate")
	}
	for i := range 100_000 {
		b.allow(strconv.Itoa(i), now)
	}
	n := 0
	for i := range b.shards {
		n += len(b.shards[i].m)
	}
	if n > 640+64 {
		t.Fatalf("%d buckets kept, bound 640", n)
	}
}

// The buckets held follow the tokens calling now, not every token served:
// pollers who each poll for a while and go (the soak's people) leave about
// the last few seconds' tokens held, far below the bound; and a drained
// bucket is never dropped before it is full again, however many sweeps.
func TestMemBucketsHoldOnlyTheTokensCallingNow(t *testing.T) {
	b := newMemBuckets(redis_rate.Limit{Rate: 5, Burst: 10, Period: time.Second}, maxMemBuckets)
	held := func() int {
		n := 0
		for i := range b.shards {
			n += len(b.shards[i].m)
		}
		return n
	}
	now := time.Unix(1_900_000_000, 0)
	// 200 new tokens every 100 ms, each polling for 1 s (every 100 ms): 2,000
	// calling at any time, 4,000 within the 2 s a bucket takes to refill.
	const perStep, steps, polls = 200, 500, 10
	for s := range steps {
		at := now.Add(time.Duration(s) * 100 * time.Millisecond)
		for first := max(0, s-polls+1); first <= s; first++ {
			for j := range perStep {
				b.allow(strconv.Itoa(first*perStep+j), at)
			}
		}
	}
	if n, served := held(), perStep*steps; n > 2*4_000+64*minSweep {
		t.Fatalf("%d buckets held after %d tokens served, 4,000 called within 2 s", n, served)
	}

	for range 11 { // drain a bucket
		b.allow("drained", now)
	}
	at := now.Add(time.Second) // 5 tokens back of 10
	for i := range 50_000 {    // every shard sweeps, several times
		b.allow("new"+strconv.Itoa(i), at)
	}
	for i := range 5 {
		if ok, _ := b.allow("drained", at); !ok {
			t.Fatalf("call %d refused with 5 tokens back", i)
		}
	}
	if ok, _ := b.allow("drained", at); ok {
		t.Fatal("a drained bucket was dropped before it was full again")
	}
}
