package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
)

// The sampler judges maxActive only on a view services read: a whole-view
// rebuild replays the record into the emptied view with completions after
// the admissions decided after them (the api applies a completion at once,
// its record lands later), so mid-replay an admitted set can hold several
// times maxActive, under a marker that says rebuilding; the rebuild's settle
// ends it within the cap before the marker says ready again. Over the cap
// in a ready view is counted and described.
func TestTheSamplerCountsOnlyAReadyView(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.StartRedis(t).Client()
	const item, limit = "chaos-a", 8
	key := "wr:{" + item + "}:admitted"
	fill := func(n int) {
		t.Helper()
		exp := time.Now().Add(time.Minute).UnixMilli()
		p := rdb.TxPipeline()
		p.Del(ctx, key)
		for i := range n {
			p.ZAdd(ctx, key, redis.Z{Score: float64(exp), Member: fmt.Sprintf("tok-%02d", i)})
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	s := &sampler{rdb: rdb, items: map[string]int64{item: limit}, max: map[string]int64{}, out: &out}
	sample := func() (over, unread int, max int64) {
		s.sample(ctx, item, limit)
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.over, s.unread, s.max[item]
	}

	fill(44) // an empty view (no marker): nobody reads it
	if over, unread, _ := sample(); over != 0 || unread != 1 {
		t.Fatalf("no marker: %d counted over the cap, %d skipped; want 0, 1", over, unread)
	}
	if err := view.SetRebuilding(ctx, rdb, "g2", "test"); err != nil {
		t.Fatal(err)
	}
	if over, unread, _ := sample(); over != 0 || unread != 2 {
		t.Fatalf("marker rebuilding: %d counted over the cap, %d skipped; want 0, 2", over, unread)
	}

	if err := view.SetReady(ctx, rdb, "g2", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	fill(limit)
	if over, _, max := sample(); over != 0 || max != limit {
		t.Fatalf("ready at the cap: %d counted over it, max %d; want 0, %d", over, max, limit)
	}
	fill(limit + 1)
	over, unread, max := sample()
	if over != 1 || unread != 2 || max != limit+1 {
		t.Fatalf("ready over the cap: %d counted over it, %d skipped, max %d; want 1, 2, %d", over, unread, max, limit+1)
	}
	if !strings.Contains(out.String(), `admitted 9 > 8 (view "ready" g2; counted)`) || !strings.Contains(out.String(), "tok-08@") {
		t.Fatalf("the sample over the cap in a ready view is not described with its members:\n%s", out.String())
	}

	// An item rebuilt on its own (listed lost) is skipped in a ready view.
	if err := rdb.HSet(ctx, view.LostKey, item, "{}").Err(); err != nil {
		t.Fatal(err)
	}
	if over, unread, _ := sample(); over != 1 || unread != 3 {
		t.Fatalf("a lost item: %d counted over the cap, %d skipped; want 1, 3", over, unread)
	}
}
