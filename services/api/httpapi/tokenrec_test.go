package httpapi

import (
	"strconv"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/redisview/view"
)

// A status bucket kept in the tokens' records (useBucket) is one per token:
// it holds its burst, refills at its rate, says when a token is back, and
// another token's or another item's reads never take from it. takeStatus
// hands back the token's own remembered read from the same look-up; a
// drained bucket survives the sweeps, and records of full buckets and stale
// reads are dropped, so the records stay bounded however many tokens call.
func TestStatusBucketInTheTokensRecord(t *testing.T) {
	p := newPositions(nil, nil, 250*time.Millisecond, time.Minute, 6_400, time.Second)
	p.useBucket(newMemBuckets(redis_rate.Limit{Rate: 5, Burst: 10, Period: time.Second}, 1))
	now := time.Unix(1_900_000_000, 0)
	p.now = func() time.Time { return now }
	waiting := line.Status{State: line.Waiting, Position: 5, Seq: 10, Head: 5}
	p.remember("it", "a", waiting, view.ItemGen{})
	for i := range 10 {
		ok, _, look := p.takeStatus("it", "a", nil)
		if !ok {
			t.Fatalf("call %d within the burst refused", i)
		}
		if !look.looked || look.e == nil || look.e.exact.Seq != 10 {
			t.Fatalf("call %d: the token's remembered read not found with its bucket: %+v", i, look)
		}
	}
	if ok, wait, _ := p.takeStatus("it", "a", nil); ok || wait != 200*time.Millisecond {
		t.Fatalf("past the burst: %v, %s; want refused for 200ms", ok, wait)
	}
	if ok, _, look := p.takeStatus("it", "b", nil); !ok || look.e != nil {
		t.Fatalf("another token is held back (%v) or finds a read (%+v)", ok, look)
	}
	if ok, _, _ := p.takeStatus("other", "a", nil); !ok {
		t.Fatal("the same tokenId of another item is held back")
	}
	for i := range 100_000 {
		p.takeStatus("it", strconv.Itoa(i), nil)
	}
	n := 0
	for i := range p.shards {
		n += len(p.shards[i].m)
	}
	if n > 6_400+64 {
		t.Fatalf("%d records kept, bound 6,400", n)
	}
	now = now.Add(200 * time.Millisecond)
	if ok, _, _ := p.takeStatus("it", "a", nil); !ok {
		t.Fatal("a token is not back after 1/rate")
	}
}

// The records follow the tokens calling now: 100,000 tokens calling once
// each over a second leave about those of the last 200 ms (a bucket's
// refill after one call) held, and a drained bucket outlives the sweeps.
func TestTokenRecordsHoldOnlyTheTokensCallingNow(t *testing.T) {
	p := newPositions(nil, nil, 250*time.Millisecond, time.Minute, 1_000_000, time.Second)
	p.useBucket(newMemBuckets(redis_rate.Limit{Rate: 5, Burst: 10, Period: time.Second}, 1))
	now := time.Unix(1_900_000_000, 0)
	p.now = func() time.Time { return now }
	for range 10 {
		p.takeStatus("it", "a", nil)
	}
	for i := range 100_000 {
		now = now.Add(10 * time.Microsecond)
		p.takeStatus("it", strconv.Itoa(i), nil)
	}
	n := 0
	for i := range p.shards {
		n += len(p.shards[i].m)
	}
	if n > 2*20_000+64*minSweep {
		t.Fatalf("%d records held after 100,000 tokens, 20,000 of them called within 200 ms", n)
	}
	for i := range 5 { // a second's refill, not a new bucket's 10
		if ok, _, _ := p.takeStatus("it", "a", nil); !ok {
			t.Fatalf("call %d a second after draining refused", i)
		}
	}
	if ok, _, _ := p.takeStatus("it", "a", nil); ok {
		t.Fatal("a drained bucket was dropped by a sweep: it passes again in full")
	}
}
