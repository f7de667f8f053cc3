package httpapi

import (
	"strconv"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/redisview/view"
)

// The remembered answers follow the tokens read within exactEvery, not
// every token served up to the bound: an hour's worth of people read twice
// each leaves about the last 105 s of them, and an entry still of use (a
// leave's, within exactEvery) is never dropped, however many sweeps.
func TestPositionsHoldOnlyTheTokensReadWithinExactEvery(t *testing.T) {
	p := newPositions(nil, nil, 250*time.Millisecond, time.Minute, 1_000_000, time.Second)
	now := time.Unix(1_900_000_000, 0)
	p.now = func() time.Time { return now }
	held := func() int {
		n := 0
		for i := range p.shards {
			n += len(p.shards[i].m)
		}
		return n
	}
	waiting := line.Status{State: line.Waiting, Position: 5, Seq: 10, Head: 5}
	// 100 new tokens a second, each read exactly when it comes and 45 s
	// later: 10,500 read within the last minute.
	const perSec, secs = 100, 1_000
	start := now
	for s := range secs {
		now = start.Add(time.Duration(s) * time.Second)
		for j := range perSec {
			p.remember("it", strconv.Itoa(s*perSec+j), waiting, view.ItemGen{})
			if s >= 45 {
				p.remember("it", strconv.Itoa((s-45)*perSec+j), waiting, view.ItemGen{})
			}
		}
	}
	if n := held(); n > 2*10_500+64*minSweep {
		t.Fatalf("%d answers held after %d tokens served, 10,500 read within exactEvery", n, perSec*secs)
	}

	p.left("it", "gone")
	now = now.Add(30 * time.Second)
	for i := range 200_000 { // every shard sweeps, several times
		p.remember("it", "new"+strconv.Itoa(i), waiting, view.ItemGen{})
	}
	p.remember("it", "gone", waiting, view.ItemGen{})
	key := posKey(nil, "it", "gone")
	if r, ok := p.shard(key).m[string(key)]; !ok || r.pos == nil || !r.pos.left {
		t.Fatalf("a leave 30 s ago was forgotten (%v, %+v): its reads must stay exact for a minute", ok, r)
	}
}
