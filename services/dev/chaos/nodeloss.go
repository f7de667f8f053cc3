package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/dev/cluster"
)

// The faults of a Redis Cluster (cluster.Options.RedisCluster): one master
// killed (-9) and restarted empty under the load, its items' lines lost and
// nothing else (issue 23).
const (
	NodeEmpty      = "redis-node-empty"
	EpochNodeEmpty = "redis-epoch-node-empty"
)

const (
	// nodeDown is how long the lost master stays away before it comes back
	// empty: the consumers' batches of its items fail meanwhile.
	nodeDown = time.Second
	// keptGap bounds the time between two admissions of an item on another
	// master while the lost one is away and rebuilt. Not zero: a scheduler
	// shard's lock (wr:scheduler:lock:N) hashes to any master, so an item
	// whose shard's lock was on the lost master waits for the lock to be
	// taken again (the master's absence and a lock expiry), then admits.
	keptGap = nodeDown + lockExpiry + 2*time.Second
	// lostLimit bounds the time from the master's return until its items
	// answer again.
	lostLimit = 60 * time.Second
)

// nodeLossFaults lists the faults that need a Redis Cluster.
func nodeLossFaults() []Fault {
	return []Fault{
		{Name: NodeEmpty, Aim: 10 * time.Second,
			What: "kill -9 of the Redis Cluster master holding some of the load's items (not the view's marker, the scheduler's epoch or active items), restarted empty 1 s later; its items answer 503 until rebuilt, the others keep admitting",
			pick: pickMaster(func(k nodeKeys) bool {
				return !k.marker && !k.epoch && !k.active && k.items > 0 && k.items < len(Items)
			}),
			inject: func(ctx context.Context, c *cluster.Cluster, e env) (time.Time, error) {
				return nodeLoss(ctx, c, e, false)
			}},
		{Name: EpochNodeEmpty, Aim: 10 * time.Second,
			What: "kill -9 of the Redis Cluster master holding the scheduler's epoch counter (not the view's marker), restarted empty 1 s later; the fence never goes backwards",
			pick: pickMaster(func(k nodeKeys) bool { return k.epoch && !k.marker }),
			inject: func(ctx context.Context, c *cluster.Cluster, e env) (time.Time, error) {
				return nodeLoss(ctx, c, e, true)
			}},
	}
}

// pickFor is pick for the cluster o starts: with a Redis Cluster, the
// single Redis's faults are left out (by default) or refused (named), and
// the faults of nodeLossFaults are added; without, those are refused.
func pickFor(names []string, o cluster.Options) ([]Fault, error) {
	own := nodeLossFaults()
	isOwn := func(n string) bool { return slices.ContainsFunc(own, func(f Fault) bool { return f.Name == n }) }
	if !o.RedisCluster {
		for _, n := range names {
			if isOwn(n) {
				return nil, fmt.Errorf("fault %q needs a Redis Cluster (WR_CHAOS_REDIS_CLUSTER=true)", n)
			}
		}
		return pick(names, o.Sentinel)
	}
	single := func(n string) bool {
		return n == "redis-aof" || n == "redis-empty" || (n == "consumer-cut" && !o.Isolate)
	}
	if len(names) == 0 {
		all, _ := pick(nil, false)
		for _, f := range all {
			if !single(f.Name) {
				names = append(names, f.Name)
			}
		}
		for _, f := range own {
			names = append(names, f.Name)
		}
	}
	var out []Fault
	for _, n := range names {
		if single(n) {
			return nil, fmt.Errorf("fault %q needs a single Redis, not a Redis Cluster", n)
		}
		i := slices.IndexFunc(own, func(f Fault) bool { return f.Name == n })
		if i >= 0 {
			out = append(out, own[i])
			continue
		}
		fs, err := pick([]string{n}, false)
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
	}
	return out, nil
}

// nodeKeys says what one master of the Redis Cluster holds.
type nodeKeys struct {
	marker, epoch, active bool
	items                 int // how many of the load's items
}

// pickMaster chooses the first master whose keys suit ok.
func pickMaster(ok func(nodeKeys) bool) func(context.Context, *cluster.Cluster, *env) error {
	return func(ctx context.Context, c *cluster.Cluster, e *env) error {
		if len(c.RedisNodes) == 0 {
			return errors.New("the fault needs a Redis Cluster")
		}
		held := map[*cluster.Proc]*nodeKeys{}
		at := func(key string) (*nodeKeys, error) {
			p, err := c.MasterOf(ctx, key)
			if err != nil {
				return nil, err
			}
			if held[p] == nil {
				held[p] = &nodeKeys{}
			}
			return held[p], nil
		}
		for _, k := range []struct {
			key string
			set func(*nodeKeys)
		}{
			{view.MarkerKey, func(n *nodeKeys) { n.marker = true }},
			{rebuild.EpochKey, func(n *nodeKeys) { n.epoch = true }},
			{queue.ActiveItems, func(n *nodeKeys) { n.active = true }},
		} {
			n, err := at(k.key)
			if err != nil {
				return err
			}
			k.set(n)
		}
		for _, it := range Items {
			n, err := at(queue.KeysFor(it).Seq)
			if err != nil {
				return err
			}
			n.items++
		}
		for _, p := range c.RedisNodes {
			if k := held[p]; k != nil && ok(*k) {
				e.target = p
				return nil
			}
		}
		return errors.New("no master of the Redis Cluster holds the keys this fault needs in this slot layout")
	}
}

// lossWatch is what the probes saw while a master was away and its items
// were rebuilt.
type lossWatch struct {
	mu         sync.Mutex
	refused    map[string]int // 503s of each lost item
	answered   map[string]int // 200s of each lost item
	violations []string
	epochLow   int64 // the lowest epoch counter read (0: none)
}

func (w *lossWatch) violate(format string, a ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) < 20 {
		w.violations = append(w.violations, fmt.Sprintf(format, a...))
	}
}

// nodeLoss kills the target master and restarts it empty under the load,
// and checks while its items are rebuilt: every answer of a lost item is a
// 503 or read from a line the view backs (the item's marker present), at
// least one was a 503 (the loss was seen), the items of the other masters
// are never refused as rebuilding and (unless epoch) keep admitting, the
// people who were waiting keep their order with everyone who came since
// behind them, and (epoch) the epoch counter and the epochs on the record
// never go below what they were. It returns once the lost items answer.
func nodeLoss(ctx context.Context, c *cluster.Cluster, e env, epoch bool) (time.Time, error) {
	rdb := c.RedisClient(redis.Options{MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second})
	defer rdb.Close()
	lost, kept, err := itemsOf(ctx, c, e.target)
	if err != nil {
		return time.Time{}, err
	}
	fmt.Fprintf(e.out, "chaos: %s holds %v; %v on the other masters\n", e.target.Name, lost, kept)
	line := queue.New(rdb)
	before := map[string][]string{}
	for _, it := range lost {
		if before[it], err = line.Waiting(ctx, it, 0); err != nil {
			return time.Time{}, err
		}
	}
	var epochBefore int64
	if epoch {
		if epochBefore, err = rdb.Get(ctx, rebuild.EpochKey).Int64(); err != nil {
			return time.Time{}, fmt.Errorf("read the epoch counter: %w", err)
		}
	}
	w := &lossWatch{refused: map[string]int{}, answered: map[string]int{}}
	probing, stopProbes := context.WithCancel(ctx)
	var probes sync.WaitGroup
	probes.Add(1)
	go func() {
		defer probes.Done()
		w.probe(probing, rdb, e.load, lost, kept, epochBefore, epoch)
	}()
	at := time.Now()
	err = c.RestartEmpty(ctx, e.target, nodeDown)
	restored := time.Now()
	if err == nil {
		err = lostBack(ctx, rdb, e.load, lost, restored.Add(lostLimit))
	}
	back := time.Now()
	stopProbes()
	probes.Wait()
	if err != nil {
		return restored, err
	}
	waited := 0
	for _, ids := range before {
		waited += len(ids)
	}
	fmt.Fprintf(e.out, "chaos: %s: %v answer again %s after the master's return (%d waiting before); answers of them refused %v, given %v\n",
		e.target.Name, lost, round(back.Sub(restored)), waited, w.refused, w.answered)
	if err := e.tail.caughtUp(ctx); err != nil { // who left the line is read from the record
		return restored, err
	}
	if err := w.judgeLost(ctx, line, e.tail, before); err != nil {
		return restored, err
	}
	gaps := map[string]time.Duration{}
	for _, it := range kept {
		gaps[it] = round(e.tail.admissionGap(it, at, back))
		if gap := gaps[it]; !epoch && gap > keptGap {
			w.violate("%s (another master's) admitted nobody for %s while the lost items were away", it, gap)
		}
	}
	fmt.Fprintf(e.out, "chaos: %s: the longest time without an admission of the other masters' items while away: %v\n", e.target.Name, gaps)
	if epoch {
		if err := epochsAbove(ctx, rdb, e.tail, at, restored, epochBefore, w); err != nil {
			return restored, err
		}
	}
	if len(w.violations) > 0 {
		return restored, errors.New(strings.Join(w.violations, "; "))
	}
	return restored, nil
}

// itemsOf splits the load's items into those whose line target holds and
// the others.
func itemsOf(ctx context.Context, c *cluster.Cluster, target *cluster.Proc) (lost, kept []string, err error) {
	for _, it := range Items {
		p, err := c.MasterOf(ctx, queue.KeysFor(it).Seq)
		if err != nil {
			return nil, nil, err
		}
		if p == target {
			lost = append(lost, it)
		} else {
			kept = append(kept, it)
		}
	}
	if len(lost) == 0 {
		return nil, nil, fmt.Errorf("%s holds none of the load's items", target.Name)
	}
	return lost, kept, nil
}

// judgeLost checks each lost item once it answers again: it was refused
// at least once, and its line keeps the order of before (keptOrder).
func (w *lossWatch) judgeLost(ctx context.Context, line *queue.Line, tl *tail, before map[string][]string) error {
	for it, was := range before {
		if w.refused[it] == 0 {
			w.violate("%s: never answered 503 while its master was away and rebuilt: the loss went unseen", it)
		}
		after, err := line.Waiting(ctx, it, 0)
		if err != nil {
			return err
		}
		if msg := keptOrder(was, after, tl.admittedTokens(it)); msg != "" {
			w.violate("%s: %s", it, msg)
		}
	}
	return nil
}

// probe asks, every 100 ms until ctx ends, for the status of the latest
// people of each lost and kept item still in their journey, and (epoch)
// reads the epoch counter.
func (w *lossWatch) probe(ctx context.Context, rdb redis.UniversalClient, ld *load, lost, kept []string, epochBefore int64, epoch bool) {
	for sleepCtx(ctx, 100*time.Millisecond) {
		ps := ld.all()
		for _, it := range lost {
			for _, p := range latest(ps, it, 6) {
				w.probeLost(ctx, rdb, ld, it, p.statusURL)
			}
		}
		for _, it := range kept {
			for _, p := range latest(ps, it, 3) {
				code, body, err := rawStatus(ctx, ld, p.statusURL)
				if err == nil && code == http.StatusServiceUnavailable && strings.Contains(body, view.Code) {
					w.violate("%s (another master's) refused as rebuilding: %s", it, body)
				} else if err == nil && code != http.StatusOK && code != http.StatusServiceUnavailable {
					w.violate("%s (another master's) answered %d: %s", it, code, body)
				}
			}
		}
		for _, it := range Items { // the sampler counts it too; this names the item and the moment
			if n, err := rdb.ZCard(ctx, queue.KeysFor(it).Admitted).Result(); err == nil && n > Policy.MaxActive && !rebuilding(ctx, rdb, it) {
				w.violate("%s: %d admitted at %s, above its cap of %d", it, n, time.Now().Format("15:04:05.000"), Policy.MaxActive)
			}
		}
		if epoch {
			if n, err := rdb.Get(ctx, rebuild.EpochKey).Int64(); err == nil && n < epochBefore {
				w.violate("the epoch counter read %d, below %d before the loss", n, epochBefore)
			}
		}
	}
}

// probeLost asks for one status of lost item it. A 200 is judged only when
// the item's marker was missing both before and after it: the line it read
// was gone throughout, so the answer came from memory.
func (w *lossWatch) probeLost(ctx context.Context, rdb redis.UniversalClient, ld *load, it, url string) {
	marked := func() (bool, bool) {
		n, err := rdb.Exists(ctx, view.ItemKey(it)).Result()
		return n == 1, err == nil
	}
	m0, ok0 := marked()
	code, body, err := rawStatus(ctx, ld, url)
	if err != nil {
		return
	}
	m1, ok1 := marked()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch code {
	case http.StatusServiceUnavailable:
		w.refused[it]++
	case http.StatusOK:
		w.answered[it]++
		if ok0 && ok1 && !m0 && !m1 && len(w.violations) < 20 {
			w.violations = append(w.violations, fmt.Sprintf("%s answered while its line was gone (no marker before nor after): %s", it, body))
		}
	default:
		if len(w.violations) < 20 {
			w.violations = append(w.violations, fmt.Sprintf("%s answered %d while lost: %s", it, code, body))
		}
	}
}

// rebuilding reports whether the view lists item lost (its node lost its
// keys; being rebuilt): its line is then written in the record's replay
// order, where the admitted set may pass the cap for a moment (admissions
// applied before completions that came earlier), while the item is refused
// to everyone (VIEW_REBUILDING) and admits nobody. Read after the sample:
// an item lost before the sample is lost after it.
func rebuilding(ctx context.Context, rdb redis.UniversalClient, item string) bool {
	lost, err := rdb.HExists(ctx, view.LostKey, item).Result()
	return err != nil || lost
}

// latest is up to n of the people of item who came last and are still in
// their journey (registered, not done).
func latest(ps []state, item string, n int) []state {
	var out []state
	for i := len(ps) - 1; i >= 0 && len(out) < n; i-- {
		p := ps[i]
		if p.item == item && p.statusURL != "" && !p.completed && p.outcome == "" {
			out = append(out, p)
		}
	}
	return out
}

// rawStatus is one status request: its code and body.
func rawStatus(ctx context.Context, ld *load, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ld.base+url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := ld.cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// lostBack waits until no lost item is listed lost in the view any more
// and a status of each of them (if anyone is in its journey) answers 200.
func lostBack(ctx context.Context, rdb redis.UniversalClient, ld *load, lost []string, deadline time.Time) error {
	for time.Now().Before(deadline) {
		_, gone, err := view.ReadItems(ctx, rdb)
		back := err == nil
		for _, it := range lost {
			if _, still := gone[it]; still {
				back = false
			}
			for _, p := range latest(ld.all(), it, 1) {
				if code, _, err := rawStatus(ctx, ld, p.statusURL); err != nil || code != http.StatusOK {
					back = false
				}
			}
		}
		if back {
			return nil
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("the lost items %v not answering again within %s of their master's return", lost, lostLimit)
}

// keptOrder checks a lost item's line after its rebuild against the line
// before the loss: those who waited then and wait still keep their order,
// everyone else waiting now came after them, and whoever left the line was
// admitted on the record. It returns what is wrong ("": nothing).
func keptOrder(before, after []string, admitted map[string]bool) string {
	in := map[string]bool{}
	for _, t := range before {
		in[t] = true
	}
	var stayed []string
	newcomer := false
	for _, t := range after {
		if !in[t] {
			newcomer = true
			continue
		}
		if newcomer {
			return fmt.Sprintf("%s, waiting before the loss, is now behind someone who came after it", t)
		}
		stayed = append(stayed, t)
	}
	now := map[string]bool{}
	for _, t := range after {
		now[t] = true
	}
	var was []string
	for _, t := range before {
		if now[t] {
			was = append(was, t)
		} else if !admitted[t] {
			return fmt.Sprintf("%s, waiting before the loss, is neither waiting nor admitted on the record", t)
		}
	}
	if !slices.Equal(was, stayed) {
		return fmt.Sprintf("the people who waited are in another order: %v, were %v", stayed, was)
	}
	return ""
}

// epochsAbove checks the fence after the epoch counter's loss (at: the
// kill), once every item admits again: on each item, no admission made
// after the master's return carries an epoch below one of the item's
// admissions before the kill (an item's fence); an epoch first seen after
// the return, taken from the counter after its loss, is above the counter
// before it; and the counter is not below what it was.
func epochsAbove(ctx context.Context, rdb redis.UniversalClient, tl *tail, at, restored time.Time, counterBefore int64, w *lossWatch) error {
	deadline := time.Now().Add(lostLimit)
	for {
		if _, ok := tl.admittedSince(restored, Items); ok {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no admission on every item within %s of the epoch counter's loss", lostLimit)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	if err := tl.caughtUp(ctx); err != nil {
		return err
	}
	old, high, after := tl.epochs(at, restored)
	for item, es := range after {
		for _, e := range es {
			if e < high[item] {
				w.violate("%s: an admission after the counter's loss carries epoch %d, below its %d before", item, e, high[item])
			}
			if !old[e] && e <= counterBefore {
				w.violate("%s: epoch %d, first seen after the counter's loss, is not above the counter before it (%d)", item, e, counterBefore)
			}
		}
	}
	n, err := rdb.Get(ctx, rebuild.EpochKey).Int64()
	if err != nil {
		return fmt.Errorf("read the epoch counter: %w", err)
	}
	if n < counterBefore {
		w.violate("the epoch counter is %d after its loss, below %d before", n, counterBefore)
	}
	return nil
}

// epochs reads the epochs of the admissions on the record: every epoch
// seen before at, each item's highest before at, and each item's epochs
// after restored.
func (t *tail) epochs(at, restored time.Time) (old map[int64]bool, high map[string]int64, after map[string][]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, high, after = map[int64]bool{}, map[string]int64{}, map[string][]int64{}
	for item, evs := range t.ticks {
		for _, ev := range evs {
			switch {
			case len(ev.Admitted) == 0:
			case ev.At < at.UnixMilli():
				old[ev.Epoch] = true
				high[item] = max(high[item], ev.Epoch)
			case ev.At > restored.UnixMilli():
				after[item] = append(after[item], ev.Epoch)
			}
		}
	}
	return old, high, after
}

// admittedTokens is everyone admitted to item on the record.
func (t *tail) admittedTokens(item string) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]bool{}
	for _, ev := range t.ticks[item] {
		for _, tok := range ev.Admitted {
			out[tok] = true
		}
	}
	return out
}

// admissionGap is the longest time without an admission of item on the
// record between from and to (the schedulers' clocks).
func (t *tail) admissionGap(item string, from, to time.Time) time.Duration {
	t.mu.Lock()
	var at []int64
	for _, ev := range t.ticks[item] {
		if len(ev.Admitted) > 0 && ev.At >= from.UnixMilli() && ev.At <= to.UnixMilli() {
			at = append(at, ev.At)
		}
	}
	t.mu.Unlock()
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	prev, gap := from.UnixMilli(), int64(0)
	for _, a := range append(at, to.UnixMilli()) {
		gap = max(gap, a-prev)
		prev = a
	}
	return time.Duration(gap) * time.Millisecond
}
