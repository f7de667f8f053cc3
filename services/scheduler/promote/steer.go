package promote

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/steer"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/store/sitehealth"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// SteerOptions tune the steering of the items whose policy asks for it
// (topics.SteerPolicy): the controller (pkg/domain/steer) of each item runs on the
// replica that leads the item's shard.
type SteerOptions struct {
	// Every is how often each steered item's controller steps and its
	// effective target is written (default 1 s, at least the tick).
	Every time.Duration
	// MinStep is the shortest time between two moves of a target, however
	// short the measured delay (default 5 s).
	MinStep time.Duration
	// SignalTimeout: a site silent this long has lost its signal (default 30 s).
	SignalTimeout time.Duration
	// Republish is how often an unchanged decision is recorded again, so
	// the record's last one is never far behind (default 30 s).
	Republish time.Duration
}

func (o SteerOptions) withDefaults(tick time.Duration) SteerOptions {
	if o.Every <= 0 {
		o.Every = time.Second
	}
	o.Every = max(o.Every, tick)
	if o.MinStep <= 0 {
		o.MinStep = 5 * time.Second
	}
	if o.SignalTimeout <= 0 {
		o.SignalTimeout = 30 * time.Second
	}
	if o.Republish <= 0 {
		o.Republish = 30 * time.Second
	}
	return o
}

// steered is one item's controller on this replica.
type steered struct {
	c      *steer.Controller
	follow *sitehealth.Follower
	total  int64 // people admitted since this replica began steering it
	epoch  int64
	last   topics.SteerDecision // the last one recorded
	lastAt time.Time
}

// steering runs the controllers of the steered items this replica leads.
// Only the tick goroutine touches it.
type steering struct {
	opt   SteerOptions
	store *sitehealth.Store
	items map[string]*steered
	next  map[int64]time.Time // per leadership (epoch): when its items step next
	m     *steerMetrics
}

func newSteering(rdb redis.UniversalClient, opt SteerOptions, reg prometheus.Registerer) *steering {
	return &steering{opt: opt, store: sitehealth.NewStore(rdb), items: map[string]*steered{}, next: map[int64]time.Time{},
		m: newSteerMetrics(reg)}
}

// due reports whether the items led under epoch step at now.
func (st *steering) due(epoch int64, now time.Time) bool {
	if now.Before(st.next[epoch]) {
		return false
	}
	st.next[epoch] = now.Add(st.opt.Every)
	for e, at := range st.next {
		if now.Sub(at) > time.Minute {
			delete(st.next, e) // a leadership that ended
		}
	}
	return true
}

// leave forgets the items steered under epoch, a leadership that ended:
// their gauges go with it (steerItems forgets only the items of a
// leadership still ticking), or a replica that handed a shard over would
// export its last signal age and pin for ever beside the new leader's.
func (st *steering) leave(epoch int64) {
	for item, it := range st.items {
		if it.epoch == epoch {
			delete(st.items, item)
			st.m.forget(item)
		}
	}
	delete(st.next, epoch)
}

// count adds a tick's admissions to its item's total (what arrivals are
// compared with to learn the no-show share).
func (st *steering) count(item string, admitted int) {
	if it := st.items[item]; it != nil {
		it.total += int64(admitted)
	}
}

// steerItems steps the controllers of those of items (this tick's, of the
// shard led under epoch, with their ticks) whose policy steers, records
// each decision that changed on waitroom.admissions, then writes it to
// Redis for promote: record first, view after. Items no longer steered,
// or no longer this shard's, are forgotten.
func (s *Scheduler) steerItems(ctx context.Context, out Producer, epoch int64, items []string, ticks map[string]queue.Tick, now time.Time) {
	st := s.steer
	pols, err := s.steerPolicies(ctx, items)
	if err != nil {
		s.log.Warn("read the items' steering policies", zap.Error(err))
		return
	}
	var decided []string
	var decisions []topics.SteerDecision
	for i, item := range items {
		pol := pols[i]
		it := st.items[item]
		if pol == nil {
			if it != nil {
				delete(st.items, item)
				st.m.forget(item)
			}
			continue
		}
		cfg := steerConfig(pol, st.opt)
		if it == nil || it.epoch != epoch {
			// A new leadership starts from the target Redis holds (the
			// last decision), else from maxActive (at most 10).
			start := int64(10)
			if pol.MaxActive > 0 {
				start = min(start, pol.MaxActive)
			}
			if cur, ok, err := s.line.Steering(ctx, item); err == nil && ok && cur.Last != nil {
				start = max(cur.Last.Target, 1)
			}
			c, err := steer.New(cfg, start)
			if err != nil {
				s.log.Warn("cannot steer", zap.String("item", item), zap.Error(err))
				continue
			}
			it = &steered{c: c, follow: sitehealth.NewFollower(st.opt.SignalTimeout), epoch: epoch}
			st.items[item] = it
		} else if err := it.c.SetConfig(cfg); err != nil {
			s.log.Warn("cannot steer", zap.String("item", item), zap.Error(err))
			continue
		}
		reports, err := st.store.Read(ctx, item, now)
		if err != nil {
			s.log.Warn("read the site's signal", zap.String("item", item), zap.Error(err))
		}
		sig := it.follow.Next(reports, now)
		d := it.c.Step(now, sig, steer.Line{AdmittedTotal: it.total})
		rec := decisionOf(d, ticks[item].Head)
		st.m.observe(item, pol, d, cfg, sig != nil)
		if it.lastAt.IsZero() || changed(it.last, rec) || now.Sub(it.lastAt) >= st.opt.Republish {
			decided, decisions = append(decided, item), append(decisions, rec)
			continue
		}
		// Between records the allowance is re-based on the line's head at
		// every step; the record keeps the last one written.
		if err := s.line.Steer(ctx, item, epoch, &rec, now); err != nil {
			s.log.Warn("write the effective target", zap.String("item", item), zap.Error(err))
		}
	}
	s.recordSteering(ctx, out, epoch, now, decided, decisions)
	for item, it := range st.items {
		if _, ok := ticks[item]; !ok && it.epoch == epoch { // this leadership's, not ticked: no longer active
			delete(st.items, item)
			st.m.forget(item)
		}
	}
}

// recordSteering publishes the decisions on out, then writes those recorded.
func (s *Scheduler) recordSteering(ctx context.Context, out Producer, epoch int64, now time.Time, items []string, ds []topics.SteerDecision) {
	if len(items) == 0 {
		return
	}
	recs := make([]*kgo.Record, len(items))
	for i, item := range items {
		ev := topics.AdmissionEvent{V: topics.Version, Kind: topics.KindSteer, ItemID: item, Epoch: epoch, At: now.UnixMilli(), Steer: &ds[i]}
		recs[i] = &kgo.Record{Topic: topics.Admissions, Key: []byte(item), Value: topics.Encode(&ev)}
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	res := out.ProduceSync(pctx, recs...)
	if err := s.advance(pctx, out, res); err != nil {
		s.log.Warn("advance the view marker past the steering records", zap.Error(err))
	}
	for i, r := range res {
		item := items[i]
		if r.Err != nil {
			s.log.Warn("record a steering decision; the next step tries again", zap.String("item", item), zap.Error(r.Err))
			continue
		}
		if err := s.line.Steer(pctx, item, epoch, &ds[i], now); err != nil {
			s.log.Warn("write the effective target", zap.String("item", item), zap.Error(err))
			continue
		}
		if it := s.steer.items[item]; it != nil {
			if it.last.Reason != ds[i].Reason || it.last.Target != ds[i].Target {
				s.log.Info("steering", zap.String("item", item), zap.Int64("target", ds[i].Target), zap.Float64("rate", ds[i].Rate),
					zap.Int64("allow", ds[i].Allow), zap.String("reason", ds[i].Reason), zap.Float64("p95Ms", ds[i].P95Ms),
					zap.Int64("siteActive", ds[i].SiteActive), zap.Bool("advice", ds[i].Advice), zap.Bool("static", ds[i].Static))
			}
			it.last, it.lastAt = ds[i], now
		}
	}
}

// steerPolicy is what the controller needs of an item's state.
type steerPolicy struct {
	topics.SteerPolicy
	MinRate, MaxRate float64
	MaxActive        int64
}

// steerPolicies reads the steering policy of each item (nil: not steered)
// in one pipelined round.
func (s *Scheduler) steerPolicies(ctx context.Context, items []string) ([]*steerPolicy, error) {
	cmds := make([]*redis.SliceCmd, len(items))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range items {
			cmds[i] = p.HMGet(ctx, queue.KeysFor(it).State, "steer", "minRate", "maxRate", "maxActive")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]*steerPolicy, len(items))
	for i, c := range cmds {
		v := c.Val()
		if len(v) < 4 || v[0] == nil || v[0] == "" {
			continue
		}
		var p steerPolicy
		if err := json.Unmarshal([]byte(fmt.Sprint(v[0])), &p.SteerPolicy); err != nil {
			s.log.Warn("corrupt steering policy", zap.String("item", items[i]), zap.Error(err))
			continue
		}
		p.MinRate, _ = strconv.ParseFloat(fmt.Sprint(v[1]), 64) // a state stored before the field: 0
		p.MaxRate, _ = strconv.ParseFloat(fmt.Sprint(v[2]), 64)
		p.MaxActive, _ = strconv.ParseInt(fmt.Sprint(v[3]), 10, 64)
		out[i] = &p
	}
	return out, nil
}

func steerConfig(p *steerPolicy, o SteerOptions) steer.Config {
	return steer.Config{
		TargetP95: time.Duration(p.TargetP95Ms) * time.Millisecond, MaxErrorRatio: p.MaxErrorRatio,
		MinRate: p.MinRate, MaxRate: p.MaxRate, MaxTarget: p.MaxActive,
		MinStep: o.MinStep, SignalTimeout: o.SignalTimeout,
		OnLost: steer.OnLost(p.OnSignalLost), Mode: steer.Mode(p.Mode),
	}
}

// decisionOf is the record of a decision taken when the item's head was head.
func decisionOf(d steer.Decision, head int64) topics.SteerDecision {
	return topics.SteerDecision{
		Target: d.Target, Allow: max(d.Allow, 0), HeadLimit: head + max(d.Allow, 0), Rate: math.Round(d.Rate*1000) / 1000, Static: d.Static, Advice: d.Advice,
		Reason: d.Reason, P95Ms: float64(d.P95.Microseconds()) / 1000, ErrorRatio: d.ErrorRatio, SiteActive: d.SiteActive,
		ShowRatio: math.Round(d.ShowRatio*1000) / 1000, DelayMs: d.Delay.Milliseconds(), SignalAgeMs: d.SignalAge.Milliseconds(),
	}
}

// changed reports a decision worth a record: the target, the reason or
// what applies moved, or the rate or allowance by more than 10%.
func changed(a, b topics.SteerDecision) bool {
	off := func(x, y float64) bool { return math.Abs(x-y) > 0.1*math.Max(math.Abs(x), 1) }
	return a.Target != b.Target || a.Reason != b.Reason || a.Static != b.Static || a.Advice != b.Advice ||
		off(a.Rate, b.Rate) || off(float64(a.Allow), float64(b.Allow))
}

// steerMetrics show each steered item's effective target beside the
// operator's bounds, the signal it follows and its decisions.
type steerMetrics struct {
	target, rate, capacity, minRate, maxRate *prometheus.GaugeVec
	p95, siteActive, signalAge, pinned, show *prometheus.GaugeVec
	decisions                                *prometheus.CounterVec
}

func newSteerMetrics(reg prometheus.Registerer) *steerMetrics {
	g := func(name, help string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "waitroom_steer_" + name, Help: help}, []string{"item"})
		reg.MustRegister(v)
		return v
	}
	m := &steerMetrics{
		target:     g("target_sessions", "The steering controller's concurrency target: sessions the site should hold."),
		rate:       g("rate_per_second", "The effective admission rate (the ramp) the controller set."),
		capacity:   g("allow", "People promote may still admit until the next step (the target's headroom, no-shows counted)."),
		minRate:    g("min_rate_per_second", "The operator's lower bound of the rate (policy.minRate)."),
		maxRate:    g("max_rate_per_second", "The operator's upper bound of the rate (policy.maxRate)."),
		p95:        g("site_p95_seconds", "The site's p95 latency in the last signal, from its merged histogram."),
		siteActive: g("site_active_sessions", "The site's active sessions in the last signal."),
		signalAge:  g("signal_age_seconds", "Age of the site's last signal; +Inf when none was ever received."),
		pinned:     g("pinned_at_min_rate", "1 while the controller wants less than minRate allows (over target at minRate)."),
		show:       g("show_ratio", "Of the people admitted, the share that arrives at the site."),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "waitroom_steer_decisions_total",
			Help: "Steps of the controller, by item and reason."}, []string{"item", "reason"}),
	}
	reg.MustRegister(m.decisions)
	return m
}

func (m *steerMetrics) observe(item string, p *steerPolicy, d steer.Decision, c steer.Config, heard bool) {
	m.target.WithLabelValues(item).Set(float64(d.Target))
	m.rate.WithLabelValues(item).Set(d.Rate)
	m.capacity.WithLabelValues(item).Set(float64(d.Allow))
	m.minRate.WithLabelValues(item).Set(p.MinRate)
	m.maxRate.WithLabelValues(item).Set(p.MaxRate)
	m.p95.WithLabelValues(item).Set(d.P95.Seconds())
	m.siteActive.WithLabelValues(item).Set(float64(d.SiteActive))
	age := d.SignalAge.Seconds()
	if !heard {
		age = math.Inf(1)
	}
	m.signalAge.WithLabelValues(item).Set(age)
	pinned := 0.0
	if d.PinnedLow(c) {
		pinned = 1
	}
	m.pinned.WithLabelValues(item).Set(pinned)
	m.show.WithLabelValues(item).Set(d.ShowRatio)
	m.decisions.WithLabelValues(item, d.Reason).Inc()
}

func (m *steerMetrics) forget(item string) {
	for _, v := range []*prometheus.GaugeVec{m.target, m.rate, m.capacity, m.minRate, m.maxRate, m.p95, m.siteActive, m.signalAge, m.pinned, m.show} {
		v.DeleteLabelValues(item)
	}
	m.decisions.DeletePartialMatch(prometheus.Labels{"item": item})
}
