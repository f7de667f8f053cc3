package steer

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Mode is what the controller does with its decisions.
type Mode string

// Modes of a controller.
const (
	// Steer applies each decision: promote admits within it.
	Steer Mode = "steer"
	// Advise computes and publishes decisions, and applies none: the
	// operator's static policy runs, the console shows what would happen.
	Advise Mode = "advise"
	// Lock holds the concurrency target where it is (the operator's value
	// when it starts locked) while still pacing admissions to it.
	Lock Mode = "lock"
)

// OnLost is what a controller does when the signal stops.
type OnLost string

// What a lost signal leads to.
const (
	// Hold keeps the last target, cap and rate.
	Hold OnLost = "hold"
	// Static gives the item back to the operator's static policy until
	// the signal returns.
	Static OnLost = "static"
)

// Config is the operator's intent for one item's controller.
type Config struct {
	TargetP95     time.Duration // the site's p95 latency to stay under (required)
	MaxErrorRatio float64       // errors/requests above this shrink the target (default 0.05)
	// MinRate and MaxRate bound the ramp rate (people per second); the
	// controller never admits faster than MaxRate (required, > 0).
	MinRate, MaxRate float64
	// MinTarget and MaxTarget bound the concurrency target (default 1 and
	// no bound).
	MinTarget, MaxTarget int64
	// Band is the hysteresis: the target grows only while p95 is below
	// (1-Band)*TargetP95 and shrinks once it passes (1-Band/2)*TargetP95,
	// a margin that keeps the noise of one window under TargetP95
	// (default 0.3).
	Band float64
	// MinStep is the shortest time between two moves of the target, even
	// when the measured delay is shorter (default 5 s).
	MinStep time.Duration
	// SignalTimeout: a signal older than this is lost (default 30 s).
	SignalTimeout time.Duration
	OnLost        OnLost // default Hold
	Mode          Mode   // default Steer
}

func (c Config) withDefaults() Config {
	if c.MaxErrorRatio <= 0 {
		c.MaxErrorRatio = 0.05
	}
	if c.MinTarget <= 0 {
		c.MinTarget = 1
	}
	if c.Band <= 0 || c.Band >= 1 {
		c.Band = 0.3
	}
	if c.MinStep <= 0 {
		c.MinStep = 5 * time.Second
	}
	if c.SignalTimeout <= 0 {
		c.SignalTimeout = 30 * time.Second
	}
	if c.OnLost == "" {
		c.OnLost = Hold
	}
	if c.Mode == "" {
		c.Mode = Steer
	}
	return c
}

// Problem says why the config cannot run, or nil.
func (c Config) Problem() error {
	switch {
	case c.TargetP95 <= 0:
		return errors.New("targetP95 must be positive")
	case c.MaxRate <= 0 || c.MinRate < 0 || c.MinRate > c.MaxRate:
		return fmt.Errorf("rates must satisfy 0 <= minRate (%v) <= maxRate (%v), maxRate > 0", c.MinRate, c.MaxRate)
	case c.MaxTarget > 0 && c.MaxTarget < c.MinTarget:
		return fmt.Errorf("maxTarget %d is below minTarget %d", c.MaxTarget, c.MinTarget)
	case c.OnLost != "" && c.OnLost != Hold && c.OnLost != Static:
		return fmt.Errorf("onLost %q is not hold or static", c.OnLost)
	case c.Mode != "" && c.Mode != Steer && c.Mode != Advise && c.Mode != Lock:
		return fmt.Errorf("mode %q is not steer, advise or lock", c.Mode)
	}
	return nil
}

// Line is what the scheduler knows of the item when it steps.
type Line struct {
	AdmittedTotal int64 // people admitted since the controller started (never falls)
}

// Reasons a decision gives.
const (
	ReasonStart    = "start"
	ReasonGrow     = "grow: p95 under the band"
	ReasonShrink   = "shrink: p95 or errors over target"
	ReasonBand     = "hold: p95 inside the band"
	ReasonIdle     = "hold: the site uses too little of the target to test a bigger one"
	ReasonDrain    = "hold: over target, waiting for sessions above the target to end"
	ReasonWait     = "hold: waiting one measured delay since the last move"
	ReasonLostHold = "signal lost: hold"
	ReasonLostBack = "signal lost: static policy"
	ReasonNoSignal = "no signal yet: static policy"
	ReasonLocked   = "locked"
)

// Decision is one step of the controller.
type Decision struct {
	At     time.Time
	Target int64   // the concurrency target: sessions the site should hold
	Rate   float64 // the ramp rate (people per second), within [MinRate, MaxRate]
	// Allow is how many more people promote may admit from the line until
	// the next decision: the target's headroom, counting that only
	// ShowRatio of the admitted arrive (the no-show compensation). An
	// allowance, not a cap on the admitted set: admissions that expire
	// free no room, so the site never fills up behind the controller.
	Allow  int64
	Static bool // the operator's static policy runs (signal lost, OnLost Static)
	Advice bool // advise-only: nothing is applied
	Reason string
	Moved  bool // Target changed at this step

	// The signal it followed.
	P95        time.Duration
	ErrorRatio float64
	SiteActive int64
	ShowRatio  float64       // of the people admitted, the share that arrives
	Delay      time.Duration // measured delay from admission to arrival
	SignalAge  time.Duration
}

// PinnedLow reports a controller that wants less than MinRate allows: the
// site is over target while the rate is at MinRate.
func (d Decision) PinnedLow(c Config) bool {
	return !d.Static && (d.Reason == ReasonShrink || d.Reason == ReasonDrain) && d.Rate <= c.MinRate
}

type mark struct {
	at    time.Time
	total int64
}

// Controller steers one item. It is not safe for concurrent use; the
// scheduler replica that owns the item's shard keeps one per item.
type Controller struct {
	cfg      Config
	target   float64
	rate     float64
	allow    int64
	lastEval time.Time // the last decision on the evidence
	evidence Signal    // the signals since lastEval plus one delay, merged
	lastSig  time.Time // the newest signal learnt from
	show     float64   // arrived/admitted, of the EWMAs below
	arrived  float64   // EWMA of arrivals a window
	admitted float64   // EWMA of admissions a window, one delay earlier
	delay    time.Duration
	heard    bool   // an arrival was reported: the delay and the show ratio can be learnt
	marks    []mark // AdmittedTotal over the last minutes, oldest first
	started  bool
}

// New returns a controller that starts from target (the last effective
// target, or the operator's maxActive; MinTarget when 0).
func New(cfg Config, target int64) (*Controller, error) {
	if err := cfg.Problem(); err != nil {
		return nil, fmt.Errorf("steer config: %w", err)
	}
	cfg = cfg.withDefaults()
	c := &Controller{cfg: cfg, show: 1, rate: cfg.MinRate}
	c.target = float64(c.clampTarget(target))
	return c, nil
}

// Config is the config the controller runs with (defaults filled in).
func (c *Controller) Config() Config { return c.cfg }

// SetConfig changes the operator's intent and keeps what was learnt.
func (c *Controller) SetConfig(cfg Config) error {
	if err := cfg.Problem(); err != nil {
		return fmt.Errorf("steer config: %w", err)
	}
	c.cfg = cfg.withDefaults()
	c.target = float64(c.clampTarget(int64(c.target)))
	c.rate = min(max(c.rate, c.cfg.MinRate), c.cfg.MaxRate)
	return nil
}

func (c *Controller) clampTarget(t int64) int64 {
	t = max(t, c.cfg.MinTarget)
	if c.cfg.MaxTarget > 0 {
		t = min(t, c.cfg.MaxTarget)
	}
	return t
}

// interval is how long a move takes to show in the signal: the measured
// delay from admission to arrival plus the signal's window, at least MinStep.
func (c *Controller) interval(window time.Duration) time.Duration {
	return max(c.cfg.MinStep, c.delay+window)
}

// Step decides at now from the latest signal (nil: none yet) and the line.
// Call it every tick or so: the target moves at most once per measured
// delay, the cap follows the line at every call.
func (c *Controller) Step(now time.Time, sig *Signal, line Line) Decision {
	c.record(now, line.AdmittedTotal)
	d := Decision{At: now, Advice: c.cfg.Mode == Advise, ShowRatio: c.show, Delay: c.delay}
	if sig == nil || now.Sub(sig.At) > c.cfg.SignalTimeout {
		return c.lost(d, sig, now)
	}
	d.SignalAge = now.Sub(sig.At)
	d.P95, d.ErrorRatio, d.SiteActive = sig.Quantile(0.95), sig.ErrorRatio(), sig.Active
	if sig.At.After(c.lastSig) {
		c.learn(sig)
		c.lastSig = sig.At
		d.ShowRatio, d.Delay = c.show, c.delay
		// Evidence is what the site saw after the last move could arrive.
		if !sig.At.Add(-sig.Window).Before(c.lastEval.Add(c.delay)) {
			if c.evidence.Window == 0 {
				c.evidence = *sig
			} else {
				c.evidence = Merge(c.evidence, *sig)
			}
		}
	}
	step := c.interval(sig.Window)
	switch {
	case !c.started:
		d.Reason = ReasonStart
		c.started, c.lastEval, c.evidence = true, now, Signal{}
	case c.cfg.Mode == Lock:
		d.Reason = ReasonLocked
	case c.evidence.Window == 0 || now.Sub(c.lastEval) < step:
		d.Reason = ReasonWait
	default:
		// One decision from the histogram of every window since the last
		// one (merged, so a percentile of seconds of requests, not of one
		// window's few), then the evidence starts again.
		ev := c.evidence
		d.Reason, d.Moved = c.move(ev.Quantile(0.95), ev.ErrorRatio(), float64(sig.Active)+c.pending(now, line))
		c.lastEval, c.evidence = now, Signal{}
	}
	d.Target = int64(math.Round(c.target))
	c.rate, c.allow = c.actuate(now, sig, line, step)
	d.Rate, d.Allow = c.rate, c.allow
	return d
}

// move is the gradient step on the concurrency target, inflight being the
// site's sessions plus the admitted on their way: shrink in proportion to
// how far p95 is over target (inflight times the mean of 1 and target/p95:
// at least 10%, at most halving) unless inflight is above the target
// already; grow by at most sqrt(target), in proportion to how far p95 is
// under the shrink line, while p95 is under the band and inflight is at
// least 90% of the target; else hold.
func (c *Controller) move(p95 time.Duration, errs float64, inflight float64) (string, bool) {
	tgt := time.Duration(float64(c.cfg.TargetP95) * (1 - c.cfg.Band/2)) // the shrink line
	grow := float64(c.cfg.TargetP95) * (1 - c.cfg.Band)
	old := c.target
	switch {
	case (p95 > tgt || errs > c.cfg.MaxErrorRatio) && inflight > old:
		// The site holds more than the target already and admits nobody
		// new: shrinking further would only wind the target down while the
		// sessions end (nobody can be un-admitted).
		return ReasonDrain, false
	case p95 > tgt || errs > c.cfg.MaxErrorRatio:
		g := 0.5
		if p95 > tgt {
			g = min(max((1+float64(tgt)/float64(p95))/2, 0.5), 0.9)
		}
		c.target = min(old, inflight) * g
	case float64(p95) < grow && errs <= c.cfg.MaxErrorRatio/2:
		if inflight < 0.9*old {
			return ReasonIdle, false
		}
		// Vegas-like: at most sqrt(target) a step (fast while small, gentle
		// once large, where latency turns steep), less the nearer p95 is to
		// the shrink line.
		near := min(float64(tgt)/max(float64(p95), 1)-1, 1)
		c.target = old + max(1, math.Sqrt(old)*near)
	default:
		return ReasonBand, false
	}
	c.target = float64(c.clampTarget(int64(math.Round(c.target))))
	if c.target == old {
		return ReasonBand, false
	}
	if c.target < old {
		return ReasonShrink, true
	}
	return ReasonGrow, true
}

// actuate turns the target into the rate and allowance promote uses. The
// headroom is what the site lacks of the target beyond its sessions and the
// admitted still on their way (pending); promote may admit headroom/show
// more people (no-shows hold an admission and no session, so they are
// replaced); the rate is the site's turnover plus the headroom spread over
// one step, scaled up by the no-shows, within [MinRate, MaxRate].
func (c *Controller) actuate(now time.Time, sig *Signal, line Line, step time.Duration) (float64, int64) {
	headroom := c.target - float64(sig.Active) - c.pending(now, line)
	var allow int64
	if headroom > 0 {
		allow = int64(math.Ceil(headroom / c.show))
	}
	turnover := 0.0
	if sig.Window > 0 {
		turnover = float64(sig.Arrivals) / sig.Window.Seconds()
	}
	rate := (turnover + max(headroom, 0)/step.Seconds()) / c.show
	return min(max(rate, c.cfg.MinRate), c.cfg.MaxRate), allow
}

// pending are the admitted people still on their way: those admitted within
// one and a half measured delays (arrival delays spread around their mean),
// times the show ratio. Before any arrival has measured the delay, MinStep
// stands in for it (a delay of zero would forget them at once and admit
// the headroom again at every step of a spike).
func (c *Controller) pending(now time.Time, line Line) float64 {
	delay := c.delay
	if !c.heard {
		delay = c.cfg.MinStep
	}
	return float64(line.AdmittedTotal-c.totalAt(now.Add(-delay*3/2))) * c.show
}

// lost is the decision without a usable signal.
func (c *Controller) lost(d Decision, sig *Signal, now time.Time) Decision {
	if sig != nil {
		d.SignalAge = now.Sub(sig.At)
	}
	// Holding keeps the last rate: at most one MinStep of it is allowed at a
	// time (the scheduler re-bases the allowance at every step).
	d.Target, d.Rate, d.Allow = int64(math.Round(c.target)), c.rate, int64(math.Ceil(c.rate*c.cfg.MinStep.Seconds()))
	if !c.started {
		// Never heard the site: there is nothing to hold. The operator's
		// policy runs (promote keeps a steered item under maxRate until the
		// controller's first decision).
		d.Static, d.Reason = true, ReasonNoSignal
		return d
	}
	if c.cfg.OnLost == Static {
		d.Static, d.Reason = true, ReasonLostBack
		return d
	}
	d.Reason = ReasonLostHold
	return d
}

// learn updates the measured delay and the show ratio from a new signal:
// the people who could arrive in the signal's window are those admitted in
// the same window one delay earlier.
func (c *Controller) learn(sig *Signal) {
	if dl := sig.ArrivalDelay(); sig.Arrivals > 0 {
		if c.delay == 0 {
			c.delay = dl
		} else {
			c.delay = (4*c.delay + dl) / 5
		}
		c.heard = true
	}
	if !c.heard {
		// Before anyone has arrived nobody is known not to come: the
		// admitted may all be on their way, and taking them for no-shows
		// would let in up to twenty times the headroom at a spike.
		return
	}
	end := sig.At.Add(-c.delay)
	admitted := c.totalAt(end) - c.totalAt(end.Add(-sig.Window))
	c.arrived = 0.95*c.arrived + 0.05*float64(sig.Arrivals)
	c.admitted = 0.95*c.admitted + 0.05*float64(admitted)
	if c.admitted >= 1 {
		// A ratio of sums over about 20 windows: ratios of single windows
		// are noisy and, clamped, biased.
		c.show = min(max(c.arrived/c.admitted, 0.05), 1)
	}
}

// record keeps AdmittedTotal over the last ten minutes.
func (c *Controller) record(now time.Time, total int64) {
	c.marks = append(c.marks, mark{now, total})
	cut := 0
	for cut < len(c.marks)-1 && now.Sub(c.marks[cut+1].at) > 10*time.Minute {
		cut++
	}
	c.marks = c.marks[cut:]
}

// totalAt is AdmittedTotal at t: the last mark at or before t (the oldest
// mark's when t is before it).
func (c *Controller) totalAt(t time.Time) int64 {
	if len(c.marks) == 0 {
		return 0
	}
	v := c.marks[0].total
	for _, m := range c.marks {
		if m.at.After(t) {
			break
		}
		v = m.total
	}
	return v
}
