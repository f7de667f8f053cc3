package main

import (
	"bufio"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// procs are the processes bench/capacity.sh measures, in the order of the
// columns of its measured file. The broker (kafka) is measured but not sized:
// kfake is a test broker, and a deployment's Kafka is bought by its own rules.
var procs = []string{"api", "consumer", "scheduler", "notifier", "redis", "kafka"}

// phase is one measured window: its wall time, the units of work done in it
// and the CPU seconds each process used over it.
type phase struct {
	wall, units float64
	cpu         map[string]float64
}

// readMeasured reads bench/capacity.sh's file: "# comment" lines, then one
// line a phase, "name wall_s units" and a CPU seconds column per proc.
func readMeasured(file string) (map[string]phase, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("open measured figures: %w", err)
	}
	defer f.Close()
	out := map[string]phase{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) != 3+len(procs) {
			return nil, fmt.Errorf("%s: %q: want %d fields", file, sc.Text(), 3+len(procs))
		}
		nums := make([]float64, len(fields)-1)
		for i, s := range fields[1:] {
			if nums[i], err = strconv.ParseFloat(s, 64); err != nil {
				return nil, fmt.Errorf("%s: %q: %w", file, sc.Text(), err)
			}
		}
		p := phase{wall: nums[0], units: nums[1], cpu: map[string]float64{}}
		for i, name := range procs {
			p.cpu[name] = nums[2+i]
		}
		out[fields[0]] = p
	}
	for _, need := range []string{"idle", "register", "status", "streams", "updates", "admitted-streams", "admit"} {
		if _, ok := out[need]; !ok {
			return nil, fmt.Errorf("%s: no %q phase", file, need)
		}
	}
	return out, sc.Err()
}

// costs are the measured CPU figures the sizing uses: idle is each
// process's CPU in cores with nothing to do (the schedulers' ticks, the view
// watchers), the rest CPU seconds per unit net of that idle rate:
//
//	per unit = (cpu over the phase − idle cores × phase wall) / units
//
// and for the streams, per stream and second held (units × wall). A
// negative net (noise on a shared machine) counts as 0.
type costs struct {
	idle                          map[string]float64
	register, status, admit, upd  map[string]float64
	streamSecond                  map[string]float64
	registrations, reads, streams float64
}

func netCosts(m map[string]phase) costs {
	c := costs{idle: map[string]float64{}}
	for _, p := range procs {
		c.idle[p] = m["idle"].cpu[p] / m["idle"].wall
	}
	per := func(name string, perSecond bool) map[string]float64 {
		ph, out := m[name], map[string]float64{}
		div := ph.units
		if perSecond {
			div *= ph.wall
		}
		for _, p := range procs {
			out[p] = math.Max(ph.cpu[p]-c.idle[p]*ph.wall, 0) / math.Max(div, 1)
		}
		return out
	}
	c.register, c.status, c.admit, c.upd = per("register", false), per("status", false), per("admit", false), per("updates", false)
	c.streamSecond = per("streams", true)
	// The updates window also admitted the streams' holders: their
	// admissions' own cost (measured without streams) is not an update's.
	u := m["updates"]
	for _, p := range procs {
		c.upd[p] = math.Max(c.upd[p]-m["admitted-streams"].units*c.admit[p]/math.Max(u.units, 1), 0)
	}
	c.registrations, c.reads, c.streams = m["register"].units, m["status"].units, m["streams"].units
	return c
}

// sale is what the seller plans for.
type sale struct {
	people      float64       // registrations in the window
	window      time.Duration // over which they arrive
	poll        time.Duration // how often a page without a stream reads its status
	share       float64       // share of the waiting people holding an event stream
	admit       float64       // admissions a second
	positionGap time.Duration // WR_SSE_POSITION_EVERY: a stream's position events at most this often
	headroom    float64       // cores bought per core busy at the peak
	streamKiB   float64       // a stream's memory in the notifier
}

// load is the peak the sale puts on the services, at the end of the window,
// when everyone has registered and the line is longest:
//
//	registrations/s  = people / window
//	waiting          = people − admit × window (never below 0)
//	streams          = waiting × share
//	status reads/s   = waiting × (1 − share) / poll
//	updates/s        = streams / positionGap + admit × share (a position a
//	                   stream and gap while the line moves, one admitted event
//	                   each admitted streamer)
type load struct {
	regs, waiting, streams, reads, updates, admit float64
}

func (s sale) load() load {
	l := load{regs: s.people / s.window.Seconds(), admit: s.admit}
	l.waiting = math.Max(s.people-s.admit*s.window.Seconds(), 0)
	l.streams = l.waiting * s.share
	l.reads = l.waiting * (1 - s.share) / s.poll.Seconds()
	l.updates = l.streams/s.positionGap.Seconds() + s.admit*s.share
	return l
}

// charged says which processes each kind of work is charged to: the work
// reaches only those (a registration never reaches the notifier, a status
// read is the api's and Redis's), so what the others used in that phase is
// the shared machine's noise, not a cost of the work.
var charged = map[string][]string{
	"register": {"api", "consumer", "redis", "kafka"},
	"status":   {"api", "redis"},
	"admit":    {"consumer", "scheduler", "notifier", "redis", "kafka"},
	"streams":  {"notifier", "redis"},
	"updates":  {"notifier", "redis"},
}

// busy is the cores each service is busy at the peak: its idle rate (one
// replica) plus each kind of work's rate times its CPU per unit.
func busy(c costs, l load) map[string]float64 {
	out := map[string]float64{}
	for _, p := range procs {
		out[p] = c.idle[p]
	}
	add := func(kind string, rate float64, per map[string]float64) {
		for _, p := range charged[kind] {
			out[p] += rate * per[p]
		}
	}
	add("register", l.regs, c.register)
	add("status", l.reads, c.status)
	add("admit", l.admit, c.admit)
	add("streams", l.streams, c.streamSecond)
	add("updates", l.updates, c.upd)
	return out
}

func sizeCmd(args []string) error {
	fs := flag.NewFlagSet("size", flag.ExitOnError)
	measured := fs.String("measured", "", "bench/capacity.sh's measured.txt")
	var s sale
	fs.Float64Var(&s.people, "people", 1_000_000, "people registering in the window")
	fs.DurationVar(&s.window, "window", time.Minute, "the window they register in")
	fs.DurationVar(&s.poll, "poll", 5*time.Second, "status poll interval of a page without an event stream")
	fs.Float64Var(&s.share, "share", 0.8, "share of the waiting people holding an event stream")
	fs.Float64Var(&s.admit, "admit", 1000, "admissions a second (the item's rate)")
	fs.DurationVar(&s.positionGap, "position-every", time.Second, "WR_SSE_POSITION_EVERY")
	fs.Float64Var(&s.headroom, "headroom", 2, "cores bought per core busy at the peak")
	fs.Float64Var(&s.streamKiB, "stream-kib", 8, "a stream's memory in the notifier (BENCHMARKS.md: 7.6-8.5 KiB)")
	_ = fs.Parse(args)
	m, err := readMeasured(*measured)
	if err != nil {
		return err
	}
	c := netCosts(m)
	printCosts(c)
	l := s.load()
	fmt.Printf("\nA sale of %.0f people in %s, admitting %.0f/s, %.0f%% of the waiting on a stream, the others polling every %s:\n",
		s.people, s.window, s.admit, s.share*100, s.poll)
	fmt.Printf("peak: %.0f registrations/s, %.0f waiting, %.0f streams, %.0f status reads/s, %.0f stream updates/s\n\n",
		l.regs, l.waiting, l.streams, l.reads, l.updates)
	b := busy(c, l)
	fmt.Println("| service | busy cores at the peak | cores to buy (x" + strconv.FormatFloat(s.headroom, 'g', -1, 64) + ", rounded up) |")
	fmt.Println("|---|---|---|")
	for _, p := range procs[:5] {
		fmt.Printf("| %s | %.2f | %.0f |\n", p, b[p], math.Ceil(b[p]*s.headroom))
	}
	fmt.Printf("\nnotifier memory for the streams: %.1f GiB (%.0f KiB a stream)\n", l.streams*s.streamKiB/(1<<20), s.streamKiB)
	if b["redis"] > 0.5 {
		fmt.Printf("redis-server runs commands on one thread and one item's keys live on one node: %.2f cores of it is past half a core\n", b["redis"])
	}
	return nil
}

// printCosts prints the measured CPU per unit, the table the sizing uses.
func printCosts(c costs) {
	fmt.Printf("measured: %.0f registrations, %.0f status reads, %.0f streams held\n\n", c.registrations, c.reads, c.streams)
	fmt.Println("| process | idle (cores) | µs / registration | µs / status read | µs / admitted | µs / stream-second | µs / update delivered |")
	fmt.Println("|---|---|---|---|---|---|---|")
	us := func(kind, p string, per map[string]float64) string {
		for _, q := range charged[kind] {
			if q == p {
				return strconv.FormatFloat(per[p]*1e6, 'f', 2, 64)
			}
		}
		return "—"
	}
	for _, p := range procs {
		fmt.Printf("| %s | %.3f | %s | %s | %s | %s | %s |\n", p, c.idle[p], us("register", p, c.register), us("status", p, c.status),
			us("admit", p, c.admit), us("streams", p, c.streamSecond), us("updates", p, c.upd))
	}
}
