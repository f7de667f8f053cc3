package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/services/dev/cluster"
	"go.uber.org/zap"
)

// The kinds of nemesis step: what happens to a link of one replica (or to
// the clients) for the step's duration.
const (
	// Slow adds 50–500 ms (latency ± jitter) to every chunk, each way.
	Slow = "slow"
	// Squeeze caps the link at 2–16 kB/s each way.
	Squeeze = "squeeze"
	// Timeout: the link accepts and never answers; at the end what it held
	// is dropped and its connections reset (toxiproxy's timeout toxic).
	Timeout = "timeout"
	// ResetPeer resets every connection of the link, once a second.
	ResetPeer = "reset"
	// Partition cuts the link: every connection reset, new ones too. An api
	// cut from Kafka must answer a registration 503 within twice its produce
	// timeout (probed directly, past the front door), never hang.
	Partition = "partition"
	// LeaderStall holds the Redis link of the scheduler replica admitting
	// the load past its lock expiry, then delivers what it held: the
	// replica believed it led while another took over, and its late writes
	// must be refused by the fencing.
	LeaderStall = "leader-stall"
	// SlowReaders: every SSE listener stops reading its stream (the notifier
	// must not block on them or lose their events).
	SlowReaders = "slow-readers"
	// OneWay holds one direction of a link (an asymmetric partition): "down",
	// requests reach Kafka or Redis and their answers are held, so a write
	// is done and its writer hears nothing (an api's record is on Kafka
	// while it answers 503; a scheduler's tick is applied while it times
	// out); "up", requests are held. What was held is delivered at the end.
	OneWay = "one-way"
	// Loss loses 5–25% of the link's chunks once or more, each way, as TCP
	// shows packet loss: they wait a retransmission timeout (200 ms,
	// doubling) and nothing is lost, reordered or corrupted (Toxics.Loss).
	Loss = "loss"
	// OOM fills Redis's memory in a spike: maxmemory set below the memory
	// in use (policy noeviction), so every command that may grow memory is
	// refused with OOM for 3–6 s. No registration may be lost, doubled or
	// dead-lettered: the consumer pauses and retries (OOM is trouble with
	// Redis, not with a record), the scheduler's ticks fail and resume, a
	// script refused on OOM wrote nothing (Redis refuses a script's first
	// write, never a later one: oom_test.go).
	OOM = "redis-oom"
	// Failover kills the Redis primary under load after its replica missed
	// a second of writes, and the Sentinels promote the replica (see
	// failover): drawn only when Redis runs behind Sentinel (Replicas.Redis
	// 2). The view marker must tell the promoted replica's view is older
	// than the record, and the line be rebuilt from Kafka: nobody lost.
	Failover = "redis-failover"
)

// Step is one fault of a nemesis schedule.
type Step struct {
	At, For time.Duration // from the start of the nemesis
	Kind    string
	Proc    string // api-1, ..., "leader" (resolved when the step starts), "clients"
	Link    string // kafka (every broker), redis, in (from the front door); empty for clients
	Toxics  cluster.Toxics
	Dir     cluster.Direction // the direction a one-way step holds
}

func (s Step) String() string {
	return fmt.Sprintf("+%-6s %-7s %s", s.At.Round(100*time.Millisecond), s.For.Round(100*time.Millisecond), s.what())
}

// what is the step without its times: its target and its fault.
func (s Step) what() string {
	what := s.Kind
	switch s.Kind {
	case Slow:
		what += fmt.Sprintf(" %s±%s", s.Toxics.Latency, s.Toxics.Jitter)
	case Squeeze:
		what += fmt.Sprintf(" %d B/s", s.Toxics.Rate)
	case OneWay:
		what += " " + s.Dir.String()
	case Loss:
		what += fmt.Sprintf(" %.0f%%", 100*s.Toxics.Loss)
	}
	target := s.Proc
	if s.Link == "in" {
		target = "front→" + s.Proc
	} else if s.Link != "" {
		target += "→" + s.Link
	}
	return fmt.Sprintf("%-28s %s", target, what)
}

// blocking steps stop a link carrying anything: at most one per kind of
// process at a time, so a partition isolates one replica, not a service.
func (s Step) blocking() bool {
	return s.Kind == Timeout || s.Kind == Partition || s.Kind == LeaderStall || s.Kind == OneWay
}

// Replicas of each kind of process the schedule picks targets from; Redis
// is the number of Redis servers (2: a primary and a replica behind
// Sentinel, and failovers are drawn).
type Replicas struct{ APIs, Consumers, Schedulers, Notifiers, Redis int }

// maxOverlap is the most steps active at once.
const maxOverlap = 3

// Schedule is the nemesis of seed: a sequence of steps over length, one to
// three active at any time, each on one link of one replica. It is a pure
// function of its arguments (math/rand/v2's PCG seeded from seed), so
// WR_CHAOS_SEED replays a run's schedule; only thread timing differs.
func Schedule(seed int64, length time.Duration, r Replicas) []Step {
	p := &planner{rng: rand.New(rand.NewPCG(uint64(seed), 0x6e656d65736973)), r: r}
	for t := p.between(time.Second, 3*time.Second); t < length; t += p.between(500*time.Millisecond, 3*time.Second) {
		if a := p.active(t); len(a) >= maxOverlap {
			end := a[0].At + a[0].For
			for _, s := range a[1:] {
				end = min(end, s.At+s.For)
			}
			t = end
			continue
		}
		s, ok := p.draw(t)
		if !ok {
			continue // single Redis: no failover (its draws are spent all the same)
		}
		if s.At+s.For > length {
			s.For = length - s.At
		}
		if s.For < time.Second || p.busy(s, t) {
			continue // the draw is spent either way: the sequence stays a function of the seed
		}
		p.steps = append(p.steps, s)
	}
	return p.steps
}

// planner draws a nemesis's steps from its seeded generator. The order of
// its draws is the schedule: changing it changes every seed's run.
type planner struct {
	rng   *rand.Rand
	r     Replicas
	steps []Step
}

// stepKinds are the kinds of step with their weights in the draw.
var stepKinds = []struct {
	kind   string
	weight int
}{{Slow, 3}, {Partition, 3}, {ResetPeer, 2}, {Timeout, 2}, {Squeeze, 1}, {LeaderStall, 1}, {SlowReaders, 1},
	{OneWay, 2}, {Loss, 2}, {OOM, 1}, {Failover, 1}}

// stepClasses are the kinds of process a step may hit.
var stepClasses = []string{"api", "consumer", "scheduler", "notifier"}

func (p *planner) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(p.rng.Int64N(int64(hi-lo)+1))
}

// busy reports whether a step would share a link, or a kind's one blocking
// slot, with a step active at t. Every scheduler's Redis link is one slot:
// the leader a stall takes is only known when it starts.
func (p *planner) busy(cand Step, t time.Duration) bool {
	key := func(s Step) string {
		if s.Proc == "leader" || (strings.HasPrefix(s.Proc, "scheduler") && s.Link == "redis") {
			return "scheduler→redis"
		}
		return s.Proc + "→" + s.Link
	}
	class := func(s Step) string { return strings.SplitN(s.Proc, "-", 2)[0] }
	for _, s := range p.steps {
		if t < s.At || t >= s.At+s.For {
			continue
		}
		if key(s) == key(cand) || (s.blocking() && cand.blocking() && class(s) == class(cand)) ||
			(class(s) == "leader" && class(cand) == "scheduler" && cand.blocking()) ||
			(class(cand) == "leader" && class(s) == "scheduler" && s.blocking()) {
			return true
		}
	}
	return false
}

// active are the steps active at t.
func (p *planner) active(t time.Duration) []Step {
	var a []Step
	for _, s := range p.steps {
		if s.At <= t && t < s.At+s.For {
			a = append(a, s)
		}
	}
	return a
}

// draw draws the step starting at t: its kind, then the process and link it
// hits, then its length and toxics. ok is false for a failover drawn without
// a replica to fail over to.
func (p *planner) draw(t time.Duration) (s Step, ok bool) {
	total := 0
	for _, k := range stepKinds {
		total += k.weight
	}
	n := p.rng.IntN(total)
	var kind string
	for _, k := range stepKinds {
		if n -= k.weight; n < 0 {
			kind = k.kind
			break
		}
	}
	s = Step{At: t, Kind: kind}
	class := stepClasses[p.rng.IntN(len(stepClasses))]
	links := []string{"kafka", "redis"}
	if class == "api" || class == "notifier" {
		links = append(links, "in")
	}
	procs := map[string]int{"api": p.r.APIs, "consumer": p.r.Consumers, "scheduler": p.r.Schedulers, "notifier": p.r.Notifiers}
	s.Proc = fmt.Sprintf("%s-%d", class, p.rng.IntN(procs[class])+1)
	s.Link = links[p.rng.IntN(len(links))]
	return p.shape(s)
}

// shape draws the length and the toxics of s by its kind.
func (p *planner) shape(s Step) (Step, bool) {
	between := p.between
	switch s.Kind {
	case Slow:
		s.For = between(4*time.Second, 10*time.Second)
		// latency ± jitter within 50–500 ms
		lat := between(100*time.Millisecond, 350*time.Millisecond).Round(time.Millisecond)
		s.Toxics = cluster.Toxics{Latency: lat, Jitter: between(20*time.Millisecond, min(150*time.Millisecond, lat-50*time.Millisecond)).Round(time.Millisecond)}
	case Squeeze:
		s.For = between(4*time.Second, 10*time.Second)
		s.Toxics = cluster.Toxics{Rate: int(between(2000, 16000))}
	case Timeout:
		s.For = between(2*time.Second, 5*time.Second)
	case ResetPeer:
		s.For = between(2*time.Second, 6*time.Second)
	case Partition, OneWay:
		s.For = between(3*time.Second, 8*time.Second)
		if s.Kind == OneWay {
			s.Dir = []cluster.Direction{cluster.Up, cluster.Down}[p.rng.IntN(2)]
		}
	case LeaderStall:
		s.Proc, s.Link = "leader", "redis"
		s.For = lockExpiry + between(time.Second, 3*time.Second)
	case SlowReaders:
		s.Proc, s.Link = "clients", ""
		s.For = between(3*time.Second, 8*time.Second)
	case Loss:
		s.For = between(4*time.Second, 10*time.Second)
		s.Toxics = cluster.Toxics{Loss: float64(between(5, 25)) / 100}
	case OOM:
		s.Proc, s.Link = "redis", ""
		s.For = between(3*time.Second, 6*time.Second)
	case Failover:
		s.Proc, s.Link = "redis", ""
		s.For = between(8*time.Second, 12*time.Second) // a second's freeze, the Sentinels' 1 s judgement and vote, the old primary's restart
		if p.r.Redis < 2 {
			return s, false
		}
	}
	return s, true
}

// overlapping is the most steps active at one time.
func overlapping(steps []Step) int {
	most := 0
	for _, s := range steps {
		n := 0
		for _, o := range steps {
			if o.At <= s.At && s.At < o.At+o.For {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// nemesis carries a schedule out against a running cluster.
type nemesis struct {
	c   *cluster.Cluster
	ld  *load
	log *zap.Logger
	out io.Writer
	// produceTimeout bounds an api's answer to a registration it cannot
	// record: twice its WR_PRODUCE_TIMEOUT (see Options.ProduceTimeout).
	produceTimeout time.Duration
	clock          *faultClock // told when each step begins and ends

	mu        sync.Mutex
	hangs     []string      // an api cut from Kafka that did not answer 503 in time
	probes    int           // registrations sent to an api cut from Kafka
	slowest   time.Duration // the slowest answer to one
	ooms      int64         // commands Redis refused with OOM during redis-oom steps
	redisErrs []string      // a redis-oom or redis-failover step that could not be carried out
}

// oom fills Redis's memory until end: maxmemory at three quarters of the
// memory in use (policy noeviction: nothing is evicted, writes are refused),
// then back to what it was. It counts the commands refused with OOM.
func (n *nemesis) oom(ctx context.Context, end time.Time) {
	fail := func(err error) {
		n.mu.Lock()
		n.redisErrs = append(n.redisErrs, err.Error())
		n.mu.Unlock()
		n.printf("nemesis: redis-oom: %v\n", err)
	}
	primary, err := n.c.Primary(ctx)
	if err != nil {
		fail(err)
		return
	}
	rdb := redis.NewClient(&redis.Options{Addr: primary, MaxRetries: 3})
	defer rdb.Close()
	cfg, err := rdb.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		fail(fmt.Errorf("read maxmemory: %w", err))
		return
	}
	if p := cfg["maxmemory-policy"]; p != "noeviction" {
		fail(fmt.Errorf("maxmemory-policy is %s, not noeviction: a full Redis would evict the line", p))
		return
	}
	used, err := infoInt(ctx, rdb, "memory", "used_memory")
	if err != nil {
		fail(err)
		return
	}
	refused, _ := infoInt(ctx, rdb, "errorstats", "errorstat_OOM")
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used*3/4, 10)).Err(); err != nil {
		fail(fmt.Errorf("set maxmemory: %w", err))
		return
	}
	sleepUntilCtx(ctx, end)
	// The way back must not depend on ctx: a Redis left full fails the rest.
	back, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rdb.ConfigSet(back, "maxmemory", cfg["maxmemory"]).Err(); err != nil {
		fail(fmt.Errorf("restore maxmemory %s: %w", cfg["maxmemory"], err))
		return
	}
	after, _ := infoInt(back, rdb, "errorstats", "errorstat_OOM")
	n.mu.Lock()
	n.ooms += after - refused
	n.mu.Unlock()
	n.printf("nemesis: redis-oom: maxmemory %d B (%d B in use), %d commands refused with OOM\n", used*3/4, used, after-refused)
}

// infoInt reads one number from Redis's INFO section: "field:N" or, for
// errorstats, "field:count=N" (0 when the field is absent: no such error yet).
func infoInt(ctx context.Context, rdb redis.Cmdable, section, field string) (int64, error) {
	s, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return 0, fmt.Errorf("INFO %s: %w", section, err)
	}
	for _, line := range strings.Split(s, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":")
		if !ok {
			continue
		}
		v = strings.TrimPrefix(strings.SplitN(v, ",", 2)[0], "count=")
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, nil
}

// lockedOut writes to out under the nemesis's lock.
func (n *nemesis) lockedOut() io.Writer {
	return writerFunc(func(b []byte) (int, error) { n.printf("%s", b); return len(b), nil })
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func (n *nemesis) printf(format string, a ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fmt.Fprintf(n.out, format, a...)
}

// run carries every step out from start, each in its own goroutine, and
// returns once every step is over and its link healed.
func (n *nemesis) run(ctx context.Context, steps []Step) {
	start := time.Now()
	var wg sync.WaitGroup
	for _, s := range steps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !sleepUntilCtx(ctx, start.Add(s.At)) {
				return
			}
			n.step(ctx, s, start)
		}()
	}
	wg.Wait()
}

func (n *nemesis) step(ctx context.Context, s Step, start time.Time) {
	proc, links, ok := n.target(s, start)
	if !ok {
		return
	}
	n.printf("nemesis: +%-6s start %s (%s)\n", since(start), s.what(), proc)
	n.clock.begin()
	end := time.Now().Add(s.For)
	var probing sync.WaitGroup
	if strings.HasPrefix(proc, "api") && s.Link == "kafka" && (s.Kind == Partition || s.Kind == Timeout || s.Kind == OneWay) {
		probing.Add(1)
		go func() {
			defer probing.Done()
			n.probe(ctx, proc, end)
		}()
	}
	n.inflict(ctx, s, links, end)
	for _, l := range links {
		l.Heal()
	}
	n.clock.end(time.Now())
	n.printf("nemesis: +%-6s end   %s\n", since(start), s.what())
	probing.Wait() // a try sent just before the end is answered after it
}

// target finds the process s hits (the leading scheduler for a stall) and
// the links of it s acts on; ok is false, with the reason printed, when
// there is none.
func (n *nemesis) target(s Step, start time.Time) (proc string, links []*cluster.Link, ok bool) {
	proc = s.Proc
	switch s.Proc {
	case "clients", "redis":
	case "leader":
		p, err := leader(n.c)
		if err != nil {
			n.printf("nemesis: +%s %s: no leader found (%v); skipped\n", since(start), s.Kind, err)
			return "", nil, false
		}
		proc, links = p.Name, p.Net.RedisLinks()
	default:
		p := n.proc(s.Proc)
		if p == nil || p.Net == nil {
			n.printf("nemesis: +%s %s: no isolated process %s; skipped\n", since(start), s.Kind, s.Proc)
			return "", nil, false
		}
		switch s.Link {
		case "kafka":
			links = p.Net.Kafka
		case "redis":
			links = p.Net.RedisLinks()
		case "in":
			links = []*cluster.Link{p.Net.In}
		}
	}
	return proc, links, true
}

// inflict does what s does to links (or to Redis, or to the clients) until
// end; the caller heals the links after it.
func (n *nemesis) inflict(ctx context.Context, s Step, links []*cluster.Link, end time.Time) {
	each := func(f func(l *cluster.Link)) {
		for _, l := range links {
			f(l)
		}
	}
	switch s.Kind {
	case Slow, Squeeze, Loss:
		each(func(l *cluster.Link) { l.Set(s.Toxics) })
		sleepUntilCtx(ctx, end)
	case OneWay:
		each(func(l *cluster.Link) { l.HoldOneWay(s.Dir) })
		sleepUntilCtx(ctx, end)
	case OOM:
		n.oom(ctx, end)
	case Failover:
		if _, err := failover(ctx, n.c, env{log: n.log, out: n.lockedOut()}); err != nil {
			n.mu.Lock()
			n.redisErrs = append(n.redisErrs, err.Error())
			n.mu.Unlock()
			n.printf("nemesis: redis-failover: %v\n", err)
		}
		sleepUntilCtx(ctx, end)
	case Timeout, LeaderStall:
		each((*cluster.Link).Hold)
		sleepUntilCtx(ctx, end)
		if s.Kind == Timeout {
			each((*cluster.Link).Reset)
		}
	case ResetPeer:
		for {
			each((*cluster.Link).Reset)
			if !sleepCtx(ctx, time.Second) || time.Now().After(end) {
				break
			}
		}
	case Partition:
		each((*cluster.Link).Cut)
		sleepUntilCtx(ctx, end)
	case SlowReaders:
		n.ld.stallReaders.Store(true)
		sleepUntilCtx(ctx, end)
		n.ld.stallReaders.Store(false)
	}
}

// probe registers, straight at an api whose Kafka link is down (not through
// the front door, which would retry on another replica), until the fault
// ends: every answer must be a 503 within the api's produce timeout. A 202
// is possible only when the record got through before the link went or
// after it came back (a try sent just before the end).
func (n *nemesis) probe(ctx context.Context, api string, until time.Time) {
	p := n.proc(api)
	cl := &http.Client{Timeout: n.produceTimeout}
	for i := 0; i == 0 || time.Now().Before(until); i++ {
		body := fmt.Sprintf(`{"userId":"probe-%s-%d-%d"}`, api, time.Now().UnixMilli(), i)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.Addr+"/api/v1/items/"+ProbeItem+"/registrations", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := cl.Do(req)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			n.hung(fmt.Sprintf("%s cut from Kafka: no answer to a registration within %s (%v)", api, n.produceTimeout, err))
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusAccepted {
			n.hung(fmt.Sprintf("%s cut from Kafka: a registration answered %d, want 503", api, resp.StatusCode))
			return
		}
		n.mu.Lock()
		n.probes++
		n.slowest = max(n.slowest, time.Since(t0))
		n.mu.Unlock()
		n.log.Info("probe", zap.String("api", api), zap.Int("code", resp.StatusCode), zap.Duration("in", time.Since(t0)))
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return
		}
	}
}

// hung records an api that did not answer in time, and prints it at once:
// the row's notes are few and may be full of others by the end.
func (n *nemesis) hung(s string) {
	n.mu.Lock()
	n.hangs = append(n.hangs, s)
	n.mu.Unlock()
	n.printf("nemesis: %s\n", s)
}

func (n *nemesis) proc(name string) *cluster.Proc {
	i := slices.IndexFunc(n.c.Services(), func(p *cluster.Proc) bool { return p.Name == name })
	if i < 0 {
		return nil
	}
	return n.c.Services()[i]
}

func since(start time.Time) time.Duration { return time.Since(start).Round(100 * time.Millisecond) }

func sleepUntilCtx(ctx context.Context, t time.Time) bool {
	if d := time.Until(t); d > 0 {
		return sleepCtx(ctx, d)
	}
	return ctx.Err() == nil
}

// watch checks, every interval until stopped, the invariants the record can
// tell mid-run: nobody admitted twice, nobody admitted out of order (as far
// as the record has been read: see tail.order), the admitted set within
// maxActive, and no client told something going backwards. The first
// violation of each is noted with its time; the verdict holds the worst seen.
type watch struct {
	mu   sync.Mutex
	v    verdict
	stop context.CancelFunc
	done chan struct{}
}

func startWatch(ctx context.Context, tl *tail, smp *sampler, ld *load, every time.Duration) *watch {
	ctx, cancel := context.WithCancel(ctx)
	w := &watch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for sleepCtx(ctx, every) {
			var now verdict
			tl.order(&now, true)
			smp.fill(&now)
			ld.regressions(&now)
			w.add(now, time.Now())
		}
	}()
	return w
}

// add folds one check's findings into the worst seen.
func (w *watch) add(now verdict, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := &w.v
	if now.Doubled > v.Doubled || now.OutOfOrder > v.OutOfOrder || now.Regressed > v.Regressed {
		for _, note := range now.Notes {
			v.note("%s %s", at.Format("15:04:05.000"), note)
		}
	}
	if now.OverMax > v.OverMax {
		v.note("%s the admitted set was past maxActive (%d samples over so far)", at.Format("15:04:05.000"), now.OverMax)
	}
	v.Doubled, v.OutOfOrder = max(v.Doubled, now.Doubled), max(v.OutOfOrder, now.OutOfOrder)
	v.OverMax, v.Regressed = max(v.OverMax, now.OverMax), max(v.Regressed, now.Regressed)
	v.MaxActive = max(v.MaxActive, now.MaxActive)
}

// result stops the watch and returns the worst it saw.
func (w *watch) result() verdict {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.v
}

// Skews are the clock offsets of seed: each api, scheduler and notifier's
// wall clock moved by up to ±most (WR_CLOCK_OFFSET), drawn from the seed
// apart from the schedule, so a run's skews replay with it. The schedulers
// disagree among themselves (a replica taking another's shards over judges
// the other's admission expiries on its own clock) and with the apis and
// notifiers that check those expiries. The consumers keep the machine's
// clock: they apply records, whose times are Kafka's. Zero most: none.
func Skews(seed int64, most time.Duration, r Replicas) map[string]time.Duration {
	if most <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x736b657773))
	out := map[string]time.Duration{}
	for _, k := range []struct {
		kind string
		n    int
	}{{"api", r.APIs}, {"scheduler", r.Schedulers}, {"notifier", r.Notifiers}} {
		for i := range k.n {
			out[fmt.Sprintf("%s-%d", k.kind, i+1)] = (time.Duration(rng.Int64N(int64(2*most)+1)) - most).Round(time.Millisecond)
		}
	}
	return out
}

// skewLine prints skews in a stable order.
func skewLine(skews map[string]time.Duration) string {
	names := make([]string, 0, len(skews))
	for n := range skews {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, " %s %+.3fs", n, skews[n].Seconds())
	}
	return strings.TrimSpace(b.String())
}

// faultClock tells how long the nemesis has had no step active: the meter
// marks a reading calm when it has been long enough (see sample.Calm), so
// the soak compares memory read at like moments, not a reading taken while
// a link is held (its pools and buffers full of what the fault holds up)
// against one taken after.
type faultClock struct {
	mu     sync.Mutex
	active int
	// quietFrom is when the last active step ended; zero before any step
	// ended: before the nemesis nothing is calm, the warm-up is not a like
	// moment.
	quietFrom time.Time
}

func (f *faultClock) begin() {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.active++
	f.mu.Unlock()
}

func (f *faultClock) end(now time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.active--
	if f.active == 0 {
		f.quietFrom = now
	}
	f.mu.Unlock()
}

// quietFor is how long no step has been active at now: 0 while one is, or
// before the first step began.
func (f *faultClock) quietFor(now time.Time) time.Duration {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.active > 0 || f.quietFrom.IsZero() {
		return 0
	}
	return now.Sub(f.quietFrom)
}

// WithCalm is steps with nothing active inside any of windows (from, to:
// times of the nemesis): a step starting inside one is left out, a step
// running into one is cut at its start (left out when less than a second
// remains). The soak holds the nemesis off before the readings it judges
// (Options.Calm), and the schedule stays a function of the seed.
func WithCalm(steps []Step, windows ...[2]time.Duration) []Step {
	var out []Step
	for _, s := range steps {
		keep := true
		for _, w := range windows {
			if s.At >= w[0] && s.At < w[1] {
				keep = false
				break
			}
			if s.At < w[0] && s.At+s.For > w[0] {
				s.For = w[0] - s.At
			}
		}
		if keep && s.For >= time.Second {
			out = append(out, s)
		}
	}
	return out
}

// calmWindows are the stretches of a nemesis of length the soak keeps calm
// (calm long each): those ending at its third and at its end, where growth
// takes its readings. 0: none.
func calmWindows(length, calm time.Duration) [][2]time.Duration {
	if calm <= 0 || length < 3*calm {
		return nil
	}
	return [][2]time.Duration{{length/3 - calm, length / 3}, {length - calm, length}}
}
