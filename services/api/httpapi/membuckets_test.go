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
