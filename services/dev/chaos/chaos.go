// Package chaos runs load against a multi-process cluster (package cluster),
// injects faults one after the other (kill -9 of each kind of process, Kafka
// and Redis restarts, a frozen leader, a consumer cut off from Redis; when
// named, a whole zone), then a nemesis of overlapping link faults from a
// seed (Schedule), and checks from
// the server's own data and the Kafka record, after each fault, throughout the
// nemesis and at the end, that nobody was lost, admitted twice or out of
// order, and that the admitted set never went past maxActive. `make chaos`,
// `make chaos-ci`, `make soak-chaos`.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/services/dev/cluster"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Options of a chaos run.
type Options struct {
	Cluster cluster.Options
	// Faults to inject, in order (default: all of Faults()).
	Faults []string
	// Rate is how many people arrive per second (default 20).
	Rate float64
	// Settle is how long the load runs between a recovery and the next fault
	// (default 5 s).
	Settle time.Duration
	// MaxPeople bounds the run (default 20,000).
	MaxPeople int
	// Deadline bounds the whole run (default 15 min).
	Deadline time.Duration
	// AimSlack multiplies every recovery aim before it is enforced (default
	// 1): the short run in `make test` shares two cores with the build, where
	// recovery times are noisier. Invariants are never relaxed.
	AimSlack float64
	// Nemesis is how long the nemesis runs after the faults above (0: no
	// nemesis): the schedule of Seed (see Schedule), overlapping faults on
	// the links of an isolated cluster (Cluster.Isolate).
	Nemesis time.Duration
	Seed    int64
	// Skew moves each api's, scheduler's and notifier's clock by up to
	// ±Skew, drawn from Seed (see Skews); 0: every clock the machine's.
	Skew time.Duration
	// ProduceTimeout is the apis' WR_PRODUCE_TIMEOUT (default 5 s): an api
	// cut from Kafka must answer 503 within twice it. Not within it: the
	// Kafka client fails a buffered record whose context ended only at its
	// next produce attempt, which measured up to 2 s late.
	ProduceTimeout time.Duration
	// StrictPositions fails a run in which a client was told a position
	// larger than one told before (reported either way).
	StrictPositions bool
	// Meter reads every process's RSS and goroutines, and with Cluster.Pprof each
	// service's live heap, this often (0: never)
	// into meter.csv in the cluster's dir; with it, the run fails when a
	// process's last reading is above Growth (default 1.1) times its
	// reading a third of the way in (the soak).
	Meter  time.Duration
	Growth float64
	// Calm holds the nemesis off for this long before the meter's judged
	// readings (ending at a third of the nemesis and at its end; see
	// calmWindows), and growth then judges only readings taken at least
	// calmAfter after the last step ended: memory read at like moments
	// (0: every reading judged, faults or not).
	Calm time.Duration
	// Sabotage, when set (SabotageReadmit), commits what a broken build
	// would halfway through the nemesis: the run must then fail. It tests
	// the suite, not the services.
	Sabotage string
	Log      *zap.Logger
}

// Policy of the items under load: the admitted set is small, so maxActive is
// reached while the line moves (people hold their admission Use long).
var (
	Policy = topics.AdmissionPolicy{RatePerSecond: 30, MaxActive: 8, SessionTTLSeconds: 60}
	Items  = []string{"chaos-a", "chaos-b", "chaos-c", "chaos-d"}
	// ProbeItem is registered on only by the nemesis's probes of an api cut
	// from Kafka, past the front door, outside the load and its ledger.
	ProbeItem = "chaos-probe"
	Use       = 300 * time.Millisecond
)

// lockExpiry is the schedulers' lock expiry (their default WR_SCHEDULER_LOCK_EXPIRY).
const lockExpiry = 2 * time.Second

// Fault is one injected failure and how the cluster comes back from it.
type Fault struct {
	Name string
	What string
	// Aim is the recovery time the suite holds it to (0: none, reported only).
	Aim time.Duration
	// pick chooses the target before the fault starts (the time it takes is
	// not the fault's); nil: the fault needs none.
	pick   func(ctx context.Context, c *cluster.Cluster, e *env) error
	inject func(ctx context.Context, c *cluster.Cluster, e env) (restored time.Time, err error)
	// sentinel: the fault needs Redis behind Sentinel (Cluster.Sentinel);
	// the default list has it only then.
	sentinel bool
	// named: the fault runs only when Options.Faults names it.
	named bool
}

// env is what a fault may look at to choose its target, and the target
// chosen (by the fault's pick, before the fault's clock starts).
type env struct {
	tail   *tail
	log    *zap.Logger
	out    io.Writer
	target *cluster.Proc
	link   int   // the consumer whose Redis link is cut
	load   *load // the people, for faults that measure what they saw
}

// busiestConsumer is the consumer that owns the most partitions the load
// writes to (from the group's assignment): killing or cutting off one that
// serves none of them would prove nothing.
func (e env) busiestConsumer(ctx context.Context, c *cluster.Cluster) (int, error) {
	parts := map[int32]bool{}
	for _, p := range e.tail.partitions() {
		parts[p] = true
	}
	groups, err := e.tail.adm.DescribeGroups(ctx, "waitroom-consumer")
	if err != nil {
		return 0, fmt.Errorf("describe the consumer group: %w", err)
	}
	best, most := -1, 0
	for _, g := range groups {
		for _, m := range g.Members {
			a, ok := m.Assigned.AsConsumer()
			if !ok || m.InstanceID == nil {
				continue
			}
			n := 0
			for _, t := range a.Topics {
				if t.Topic != topics.Registrations {
					continue
				}
				for _, p := range t.Partitions {
					if parts[p] {
						n++
					}
				}
			}
			for i, p := range c.Consumers {
				if *m.InstanceID == p.Name && n > most {
					best, most = i, n
				}
			}
		}
	}
	if best < 0 {
		return 0, errors.New("no consumer owns a partition of the load's items")
	}
	e.log.Info("the consumer owning the most of the load's partitions", zap.String("consumer", c.Consumers[best].Name), zap.Int("partitions", most))
	return best, nil
}

// Faults lists every fault the suite knows, in the order it injects them.
func Faults() []Fault {
	return []Fault{
		{Name: "api", What: "kill -9 of api-1, restarted", Aim: 5 * time.Second,
			pick: pickProc(func(c *cluster.Cluster) *cluster.Proc { return c.APIs[0] }), inject: restartTarget},
		{Name: "consumer", What: "kill -9 of the consumer owning most of the load's partitions, restarted", Aim: 5 * time.Second,
			pick: pickBusiest, inject: restartTarget},
		{Name: "scheduler", What: "kill -9 of the scheduler replica admitting the load, restarted", Aim: 5 * time.Second,
			pick: pickLeader, inject: restartTarget},
		{Name: "notifier", What: "kill -9 of notifier-1, restarted", Aim: 5 * time.Second,
			pick: pickProc(func(c *cluster.Cluster) *cluster.Proc { return c.Notifiers[0] }), inject: restartTarget},
		{Name: "kafka", What: "kill -9 of the Kafka process, restarted from its data dir",
			pick: pickProc(func(c *cluster.Cluster) *cluster.Proc { return c.Kafka }), inject: restartTarget},
		{Name: "redis-aof", What: "kill -9 of redis-server, restarted from its AOF",
			pick: pickProc(func(c *cluster.Cluster) *cluster.Proc { return c.Redis }), inject: restartTarget},
		{Name: "redis-empty", What: "kill -9 of redis-server, restarted empty (the view is rebuilt from Kafka)",
			inject: func(ctx context.Context, c *cluster.Cluster, _ env) (time.Time, error) {
				if err := c.Redis.Kill(); err != nil {
					return time.Time{}, err
				}
				if err := c.WipeRedis(); err != nil {
					return time.Time{}, err
				}
				err := c.Restart(ctx, c.Redis)
				return time.Now(), err
			}},
		{Name: "scheduler-stop", What: "SIGSTOP of the scheduler replica admitting the load past its lock expiry, then SIGCONT", Aim: 5 * time.Second,
			pick: pickLeader,
			inject: func(ctx context.Context, c *cluster.Cluster, e env) (time.Time, error) {
				if err := e.target.Pause(); err != nil {
					return time.Time{}, err
				}
				sleepCtx(ctx, lockExpiry+time.Second)
				return time.Now(), e.target.Resume()
			}},
		{Name: "consumer-cut", What: "the consumer owning most of the load's partitions cut off from Redis for 10 s", Aim: 15 * time.Second,
			pick: pickBusiest,
			inject: func(ctx context.Context, c *cluster.Cluster, e env) (time.Time, error) {
				links := []*cluster.Link{c.RedisLinks[e.link]}
				if e.target.Net != nil {
					links = e.target.Net.RedisLinks() // the primary's, the replica's and the Sentinels'
				}
				for _, l := range links {
					l.Cut()
				}
				sleepCtx(ctx, 10*time.Second)
				for _, l := range links {
					l.Heal()
				}
				return time.Now(), nil
			}},
		{Name: "redis-failover", What: "Sentinel failover under load: the replica cut off from the primary for 1 s, the primary killed (-9), the replica, which missed that second of writes, promoted; the old primary restarted as a replica",
			sentinel: true, inject: failover},
		zoneLoss(cluster.Zones[0]),
	}
}

// restartTarget kills the fault's target and starts it again, as an
// orchestrator would.
func restartTarget(ctx context.Context, c *cluster.Cluster, e env) (time.Time, error) {
	if err := e.target.Kill(); err != nil {
		return time.Time{}, err
	}
	err := c.Restart(ctx, e.target)
	return time.Now(), err
}

// pickProc picks the process p names as the fault's target.
func pickProc(p func(c *cluster.Cluster) *cluster.Proc) func(context.Context, *cluster.Cluster, *env) error {
	return func(_ context.Context, c *cluster.Cluster, e *env) error {
		e.target = p(c)
		return nil
	}
}

// pickLeader picks the scheduler replica admitting the load.
func pickLeader(_ context.Context, c *cluster.Cluster, e *env) error {
	var err error
	e.target, err = leader(c)
	return err
}

// pickBusiest picks the consumer owning most of the load's partitions, and
// its Redis link.
func pickBusiest(ctx context.Context, c *cluster.Cluster, e *env) error {
	i, err := e.busiestConsumer(ctx, c)
	if err == nil {
		e.link, e.target = i, c.Consumers[i]
	}
	return err
}

// leader finds the scheduler replica that is admitting the load now: the
// one whose admissions (waitroom_scheduler_admitted_total) grow the most over
// a second. With one leader that is the leader; with the items shared among
// replicas (WR_SCHEDULER_SHARDS) it is one whose shards hold the load's
// items, so taking it away must move those shards to another replica.
func leader(c *cluster.Cluster) (*cluster.Proc, error) {
	for try := 0; try < 10; try++ {
		before := admittedTotals(c)
		time.Sleep(time.Second)
		after := admittedTotals(c)
		var best *cluster.Proc
		var most float64
		for i, p := range c.Schedulers {
			if d := after[i] - before[i]; before[i] >= 0 && d > most {
				best, most = p, d
			}
		}
		if best != nil {
			return best, nil
		}
	}
	return nil, errors.New("no scheduler replica admits anyone")
}

// admittedTotals reads each scheduler's waitroom_scheduler_admitted_total
// (-1 where it cannot be read).
func admittedTotals(c *cluster.Cluster) []float64 {
	return schedulerCounter(c, "waitroom_scheduler_admitted_total")
}

// schedulerCounter reads the counter name of each scheduler (-1 where it
// cannot be read).
func schedulerCounter(c *cluster.Cluster, name string) []float64 {
	cl := &http.Client{Timeout: time.Second}
	out := make([]float64, len(c.Schedulers))
	for i, p := range c.Schedulers {
		out[i] = -1
		resp, err := cl.Get("http://" + p.Addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					out[i] = f
				}
			}
		}
	}
	return out
}

// Row is one line of the report: a fault (or the final check) and what the
// checks found after it.
type Row struct {
	Fault    string
	What     string
	Down     time.Duration // from the fault to the process restarted (or the fault lifted)
	Recovery time.Duration // from the fault to new registrations in line and admissions flowing again
	Aim      time.Duration // enforced: the fault's aim times Options.AimSlack
	Verdict  verdict
	Err      error
	// StrictPositions: a client told a larger position fails the row.
	StrictPositions bool
}

// OK reports whether the row holds every invariant and its recovery aim.
func (r Row) OK() bool {
	return r.Err == nil && r.Verdict.ok() && (r.Aim == 0 || r.Recovery <= r.Aim) && (!r.StrictPositions || r.Verdict.Regressed == 0)
}

// Run starts a cluster, runs the load and the faults, checks, stops the
// cluster, writes the table to out and returns the rows; err is a run that
// could not be carried out (a violation is a row that is not OK).
func Run(ctx context.Context, o Options, out io.Writer) ([]Row, error) {
	o.defaults()
	faults, steps, err := plan(&o, out)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Deadline)
	defer cancel()
	now := time.Now().UnixMilli()
	for _, id := range append(slices.Clone(Items), ProbeItem, ZoneItem) {
		o.Cluster.Items = append(o.Cluster.Items, topics.ItemState{ItemID: id, Name: "chaos " + id, Stock: topics.Unlimited,
			Enabled: true, Policy: Policy, Version: 1, UpdatedAt: now})
	}
	o.Cluster.Log = o.Log
	fmt.Fprintf(out, "chaos: starting the cluster in %s\n", o.Cluster.Dir)
	c, err := cluster.Start(ctx, o.Cluster)
	if err != nil {
		return nil, err
	}
	defer c.Stop()

	tl, err := newTail(c.Brokers)
	if err != nil {
		return nil, err
	}
	defer tl.cl.Close()
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	go tl.run(bg)
	rdb := c.RedisClient(redis.Options{MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	smp := &sampler{rdb: rdb, items: map[string]int64{}, max: map[string]int64{}, out: out}
	for _, id := range Items {
		smp.items[id] = Policy.MaxActive
	}
	go smp.run(bg)

	ld := newLoad(c.URL, Use, 90*time.Second)
	spawn, stopSpawn := context.WithCancel(ctx)
	defer stopSpawn()
	runID := fmt.Sprintf("r%d", time.Now().Unix()%100000)
	go ld.run(spawn, ctx, Items, o.Rate, 3, o.MaxPeople, runID)
	fmt.Fprintf(out, "chaos: load of %.0f people/s on %v (every 3rd on SSE), %d faults\n", o.Rate, Items, len(faults))
	var mt *meter
	fc := &faultClock{}
	if o.Meter > 0 {
		mt = &meter{c: c, out: out, csv: filepath.Join(c.Dir(), "meter.csv"), start: time.Now()}
		if o.Calm > 0 {
			mt.faults = fc
		}
		go mt.run(bg, o.Meter)
	}
	sleepCtx(ctx, o.Settle)

	r := &run{o: o, c: c, ld: ld, tl: tl, smp: smp, rdb: rdb, out: out}
	rows := r.faults(ctx, faults)
	if len(steps) > 0 && ctx.Err() == nil {
		rows = append(rows, runNemesis(ctx, o, c, ld, tl, smp, rdb, steps, fc, out))
	}
	if mt != nil {
		rows = append(rows, memoryRow(ctx, o, mt, out))
	}

	// The end: no one new comes; everyone still in line is served.
	stopSpawn()
	fmt.Fprintln(out, "chaos: load stopped; waiting for everyone in line to be served")
	ld.wait()
	final := Row{Fault: "final", What: "everyone served; the record, the line and every client agree", StrictPositions: o.StrictPositions}
	final.Verdict = check(ctx, ld, tl, smp, rdb, true)
	ld.regressions(&final.Verdict)
	rows = append(rows, final)
	table(out, rows, ld)
	return rows, ctx.Err()
}

// defaults fills the options left at zero.
func (o *Options) defaults() {
	if o.Rate <= 0 {
		o.Rate = 20
	}
	if o.Settle <= 0 {
		o.Settle = 5 * time.Second
	}
	if o.MaxPeople <= 0 {
		o.MaxPeople = 20000
	}
	if o.Deadline <= 0 {
		o.Deadline = 15 * time.Minute
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.AimSlack < 1 {
		o.AimSlack = 1
	}
	if o.Growth <= 1 {
		o.Growth = 1.1
	}
	if o.ProduceTimeout <= 0 {
		o.ProduceTimeout = 5 * time.Second
	}
}

// plan picks the faults, draws the clocks' skews into the cluster's
// environment and the nemesis's schedule from the seed, and prints both.
func plan(o *Options, out io.Writer) ([]Fault, []Step, error) {
	faults, err := pickFor(o.Faults, o.Cluster)
	if err != nil {
		return nil, nil, err
	}
	if o.Nemesis > 0 && !o.Cluster.Isolate {
		return nil, nil, errors.New("the nemesis needs an isolated cluster (Cluster.Isolate)")
	}
	reps := Replicas{APIs: replicas(o.Cluster.APIs, 2), Consumers: replicas(o.Cluster.Consumers, 2),
		Schedulers: replicas(o.Cluster.Schedulers, 3), Notifiers: replicas(o.Cluster.Notifiers, 2), Redis: 1}
	if o.Cluster.Sentinel {
		reps.Redis = 2
	}
	if skews := Skews(o.Seed, o.Skew, reps); len(skews) > 0 {
		fmt.Fprintf(out, "chaos: clocks of seed %d, skewed up to ±%s: %s\n", o.Seed, o.Skew, skewLine(skews))
		if o.Cluster.ProcEnv == nil {
			o.Cluster.ProcEnv = map[string][]string{}
		}
		for name, d := range skews {
			o.Cluster.ProcEnv[name] = append(o.Cluster.ProcEnv[name], "WR_CLOCK_OFFSET="+d.String())
		}
	}
	var steps []Step
	if o.Nemesis > 0 {
		steps = Schedule(o.Seed, o.Nemesis, reps)
		if o.Meter > 0 {
			if w := calmWindows(o.Nemesis, o.Calm); len(w) > 0 {
				steps = WithCalm(steps, w...)
				fmt.Fprintf(out, "chaos: the nemesis is calm over %s–%s and %s–%s, before the readings the soak judges\n", w[0][0], w[0][1], w[1][0], w[1][1])
			}
		}
		fmt.Fprintf(out, "chaos: nemesis of seed %d (WR_CHAOS_SEED=%d replays it): %d faults over %s, up to %d at once\n",
			o.Seed, o.Seed, len(steps), o.Nemesis, overlapping(steps))
		for _, s := range steps {
			fmt.Fprintf(out, "  %s\n", s)
		}
	}
	return faults, steps, nil
}

// run is what a chaos run's phases share: the cluster, the load and the
// record, and the checks' state.
type run struct {
	o   Options
	c   *cluster.Cluster
	ld  *load
	tl  *tail
	smp *sampler
	rdb redis.UniversalClient
	out io.Writer
}

// faults injects each fault in turn, measures its recovery and checks every
// invariant after it; the first fault that cannot be injected ends the list.
func (r *run) faults(ctx context.Context, faults []Fault) []Row {
	var rows []Row
	for _, f := range faults {
		if ctx.Err() != nil {
			break
		}
		row := Row{Fault: f.Name, What: f.What, Aim: time.Duration(float64(f.Aim) * r.o.AimSlack)}
		fmt.Fprintf(r.out, "chaos: %s %s: %s\n", time.Now().Format("15:04:05.000"), f.Name, f.What)
		e := env{tail: r.tl, log: r.o.Log, out: r.out, load: r.ld}
		if f.pick != nil {
			if err := f.pick(ctx, r.c, &e); err != nil {
				row.Err = err
				return append(rows, row)
			}
		}
		at := time.Now()
		restored, err := f.inject(ctx, r.c, e)
		if err != nil {
			row.Err = err
			return append(rows, row)
		}
		row.Down = restored.Sub(at)
		row.Recovery, row.Err = recovery(ctx, r.ld, r.tl, at, restored, 60*time.Second)
		if row.Err == nil {
			row.Err = allReady(ctx, r.c, 60*time.Second)
		}
		sleepCtx(ctx, r.o.Settle)
		row.Verdict = check(ctx, r.ld, r.tl, r.smp, r.rdb, false)
		fmt.Fprintf(r.out, "chaos: %s: down %s, recovered in %s, %s\n", f.Name, round(row.Down), round(row.Recovery), summary(row))
		rows = append(rows, row)
	}
	return rows
}

// memoryRow judges the meter's samples (every process's RSS, goroutines, heap
// within o.Growth from a third of the way in) and plots them. In a calm soak
// it first waits, the load running on, for the end's calm readings: the
// nemesis ends with its last step, inside the end's calm window.
func memoryRow(ctx context.Context, o Options, mt *meter, out io.Writer) Row {
	if mt.faults != nil && ctx.Err() == nil {
		fmt.Fprintf(out, "chaos: memory: waiting for %d calm readings at the end (up to %s)\n", endCalmReadings, o.Calm+3*o.Meter)
		if n := mt.awaitCalm(ctx, endCalmReadings, o.Calm+3*o.Meter); n < endCalmReadings {
			fmt.Fprintf(out, "chaos: memory: %d calm readings at the end\n", n)
		}
	}
	mt.mu.Lock()
	bad := growth(mt.samples, o.Growth, unjudged)
	mt.mu.Unlock()
	row := Row{Fault: "memory", What: fmt.Sprintf("every process's live heap after two collections (RSS where no heap is read) and goroutines at the end within x%.2f of a third of the way in (%s)", o.Growth, mt.csv)}
	if len(bad) > 0 {
		row.Err = errors.New(strings.Join(bad, "; "))
	}
	res := "every process within the limit"
	if row.Err != nil {
		res = "FAILED: " + row.Err.Error()
	}
	fmt.Fprintf(out, "chaos: memory: %s\n", res)
	svg := strings.TrimSuffix(mt.csv, ".csv") + ".svg"
	title := fmt.Sprintf("RSS, goroutines and live heap of every process, seed %d, %s of nemesis at %.0f people/s", o.Seed, o.Nemesis, o.Rate)
	if err := PlotMeter(mt.csv, svg, title); err != nil {
		fmt.Fprintf(out, "chaos: memory: no plot: %v\n", err)
	} else {
		fmt.Fprintf(out, "chaos: memory: plotted in %s\n", svg)
	}
	return row
}

// check runs every invariant check now.
func check(ctx context.Context, ld *load, tl *tail, smp *sampler, rdb redis.UniversalClient, final bool) verdict {
	var v verdict
	ld.ledger(ctx, &v, final, 20*time.Second)
	if err := tl.caughtUp(ctx); err != nil {
		v.note("the record could not be read: %v", err)
		v.Lost++ // unchecked counts as failed
	}
	tl.order(&v, false)
	if final {
		seq(ctx, rdb, tl.places(), &v)
		sseMissing(ld.all(), &v)
	}
	smp.fill(&v)
	return v
}

// stuck is how long a registration may take from its 202 to the line before
// it counts as held up by the fault.
const stuck = 500 * time.Millisecond

// recovery is the time from the fault until service is whole again: every
// registration made since the fault is in the line (the last one the fault
// held up, such as those on a dead consumer's partitions, got in), and every
// item of the load was admitted again (the last one the fault held up, such
// as those in a dead scheduler's shards, got its admission). It watches the people who came from the fault until
// a few seconds after the process came back.
func recovery(ctx context.Context, ld *load, tl *tail, at, restored time.Time, limit time.Duration) (time.Duration, error) {
	window := restored.Add(3 * time.Second)
	deadline := at.Add(limit)
	for time.Now().Before(deadline) {
		if time.Now().After(window) {
			var first, worst time.Time
			pending := false
			// Admissions flow again: every item of the load has one on the
			// record made since the fault.
			admitted, flowing := tl.admittedSince(at, Items)
			for _, p := range ld.all() {
				if p.t0.Before(at) || !p.t0.Before(window) {
					continue
				}
				switch {
				case p.got202.IsZero() && p.outcome == "":
					pending = true // still trying to register
				case p.got202.IsZero():
				case p.inLine.IsZero():
					pending = true
				default:
					if first.IsZero() || p.inLine.Before(first) {
						first = p.inLine
					}
					if p.inLine.Sub(p.got202) > stuck && p.inLine.After(worst) {
						worst = p.inLine
					}
				}
			}
			if !pending && !first.IsZero() && flowing {
				last := first
				if worst.After(last) {
					last = worst
				}
				if admitted.After(last) {
					last = admitted
				}
				return last.Sub(at), nil
			}
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
	return limit, fmt.Errorf("registrations made since the fault not all in line and admitted within %s", limit)
}

// allReady waits until every service answers /readyz.
func allReady(ctx context.Context, c *cluster.Cluster, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for _, p := range c.All() {
		if err := p.Ready(ctx); err != nil {
			return err
		}
	}
	return nil
}

// runNemesis carries the schedule out under the load, the invariants
// watched every second throughout, then waits for service to be whole again
// and checks everything.
func runNemesis(ctx context.Context, o Options, c *cluster.Cluster, ld *load, tl *tail, smp *sampler, rdb redis.UniversalClient, steps []Step, fc *faultClock, out io.Writer) Row {
	row := Row{Fault: "nemesis", What: fmt.Sprintf("seed %d: %d faults over %s, up to %d at once", o.Seed, len(steps), o.Nemesis, overlapping(steps)),
		Aim: time.Duration(float64(nemesisAim) * o.AimSlack), StrictPositions: o.StrictPositions}
	fmt.Fprintf(out, "chaos: %s nemesis: %s\n", time.Now().Format("15:04:05.000"), row.What)
	w := startWatch(ctx, tl, smp, ld, time.Second)
	n := &nemesis{c: c, ld: ld, log: o.Log, out: out, produceTimeout: 2 * o.ProduceTimeout, clock: fc}
	fencedBefore := schedulerCounter(c, "waitroom_scheduler_fenced_total")
	at := time.Now()
	if o.Sabotage != "" {
		go func() {
			if sleepCtx(ctx, o.Nemesis/2) {
				if err := sabotage(ctx, o.Sabotage, tl, out); err != nil {
					n.hung(err.Error()) // a sabotage not committed must not pass for a caught one
				}
			}
		}()
	}
	n.run(ctx, steps)
	healed := time.Now()
	var fenced float64
	for i, f := range schedulerCounter(c, "waitroom_scheduler_fenced_total") {
		if f >= 0 && fencedBefore[i] >= 0 {
			fenced += f - fencedBefore[i]
		}
	}
	fmt.Fprintf(out, "chaos: nemesis: %.0f ticks refused by the fencing (a replica that had lost its lock); registrations at an api cut from Kafka: %d, each answered within %s (the slowest in %s)\n",
		fenced, n.probes, n.produceTimeout, round(n.slowest))
	if n.ooms > 0 || len(n.redisErrs) > 0 {
		fmt.Fprintf(out, "chaos: nemesis: %d commands refused by a full Redis (OOM)\n", n.ooms)
	}
	row.Down = healed.Sub(at)
	// Recovery counts from the last fault's end: the nemesis overlaps its
	// faults, so there is no one fault to count from.
	row.Recovery, row.Err = recovery(ctx, ld, tl, healed, healed, 60*time.Second)
	if row.Err == nil {
		row.Err = allReady(ctx, c, 60*time.Second)
	}
	sleepCtx(ctx, o.Settle)
	watched := w.result()
	row.Verdict = check(ctx, ld, tl, smp, rdb, false)
	ld.regressions(&row.Verdict)
	v := &row.Verdict
	v.Doubled, v.OutOfOrder = max(v.Doubled, watched.Doubled), max(v.OutOfOrder, watched.OutOfOrder)
	v.OverMax, v.Regressed = max(v.OverMax, watched.OverMax), max(v.Regressed, watched.Regressed)
	v.MaxActive = max(v.MaxActive, watched.MaxActive)
	for _, note := range watched.Notes {
		v.note("during: %s", note)
	}
	v.Hung = len(n.hangs)
	for _, h := range n.hangs {
		v.note("%s", h)
	}
	if len(n.redisErrs) > 0 && row.Err == nil {
		row.Err = fmt.Errorf("a Redis step failed: %s", strings.Join(n.redisErrs, "; "))
	}
	fmt.Fprintf(out, "chaos: nemesis: over in %s, whole again %s after its last fault, %s\n", round(row.Down), round(row.Recovery), summary(row))
	return row
}

// nemesisAim is the recovery aim of the nemesis, from the end of its last
// fault to service whole again.
const nemesisAim = 20 * time.Second

func replicas(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}

func pick(names []string, sentinel bool) ([]Fault, error) {
	all := Faults()
	if len(names) == 0 {
		return slices.DeleteFunc(all, func(f Fault) bool { return f.sentinel && !sentinel || f.named }), nil
	}
	if len(names) == 1 && names[0] == "none" {
		return nil, nil
	}
	var out []Fault
	for _, n := range names {
		found := false
		for _, f := range all {
			if f.Name == n {
				if f.sentinel && !sentinel {
					return nil, fmt.Errorf("fault %q needs Redis behind Sentinel (WR_CHAOS_SENTINEL=true)", n)
				}
				out, found = append(out, f), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown fault %q", n)
		}
	}
	return out, nil
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }

func summary(r Row) string {
	if r.Err != nil {
		return "ERROR: " + r.Err.Error()
	}
	v := r.Verdict
	s := fmt.Sprintf("%d people: %d lost, %d doubled, %d out of order, max active %d, %d told a larger position, %d api hangs",
		v.People, v.Lost, v.Doubled, v.OutOfOrder, v.MaxActive, v.Regressed, v.Hung)
	if !r.OK() {
		s += " — FAILED"
	}
	return s
}

func table(out io.Writer, rows []Row, ld *load) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tdown\trecovery (aim)\t202s\tlost\tunserved\tdoubled\tout of order\tseq\tmax active (≤ cap)\tSSE missed\ttold back\tapi hung\tresult")
	for _, r := range rows {
		v := r.Verdict
		if r.Fault == "memory" {
			res := "ok"
			if !r.OK() {
				res = "FAILED: " + r.Err.Error()
			}
			fmt.Fprintf(tw, "memory\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n", res)
			continue
		}
		aim := "-"
		if r.Aim > 0 {
			aim = r.Aim.String()
		}
		rec, down := "-", "-"
		if r.Fault != "final" && r.Fault != "memory" {
			rec, down = fmt.Sprintf("%s (%s)", round(r.Recovery), aim), round(r.Down).String()
		}
		res := "ok"
		if !r.OK() {
			res = "FAILED"
			if r.Err != nil {
				res += ": " + r.Err.Error()
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d (%d)\t%d\t%d\t%d\t%s\n", r.Fault, down, rec, v.People, v.Lost, v.Unserved,
			v.Doubled, v.OutOfOrder, v.SeqMismatch, v.MaxActive, Policy.MaxActive, v.SSEMissing, v.Regressed, v.Hung, res)
	}
	tw.Flush()
	ps := ld.all()
	var sse, viaSSE, reconnects, completed int
	for _, p := range ps {
		if p.sse {
			sse++
			reconnects += p.reconnects
			if p.via == "sse" {
				viaSSE++
			}
		}
		if p.completed {
			completed++
		}
	}
	fmt.Fprintf(out, "\npeople %d, completed %d, never got a 202 %d; SSE listeners %d, told over SSE %d, reconnects %d\n",
		len(ps), completed, ld.refused.Load(), sse, viaSSE, reconnects)
	for _, r := range rows {
		for _, n := range r.Verdict.Notes {
			fmt.Fprintf(out, "  %s: %s\n", r.Fault, n)
		}
	}
}
