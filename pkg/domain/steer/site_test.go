package steer

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// site is a synthetic protected site whose latency rises with its active
// sessions, as a real site's does: base/(1-ρ) while ρ = active/capacity < 0.95,
// steeper beyond, with log-normal noise; errors once ρ passes 1.2. Admitted
// people arrive after delay (a show share of them; the rest never come) and
// stay session long, each sending one request every two seconds.
type site struct {
	rng      *rand.Rand
	base     time.Duration
	capacity float64
	delay    time.Duration
	session  time.Duration
	show     float64
	ttl      time.Duration // how long an admission lasts in the room

	now      time.Time
	arriving []arrival
	sessions []time.Time // end of each active session
	admitted []time.Time // expiry of each admission
	total    int64       // admitted so far
	served   int64       // arrivals so far
	errs     uint64      // failed requests so far
	lat      []float64   // every request's latency in ms, for p99
	win      Signal      // the signal being gathered
}

type arrival struct {
	at, admittedAt time.Time
}

func newSite(seed uint64, capacity float64, show float64) *site {
	return &site{
		rng: rand.New(rand.NewPCG(seed, 7)), base: 40 * time.Millisecond, capacity: capacity,
		delay: 4 * time.Second, session: 90 * time.Second, show: show, ttl: 150 * time.Second,
		now: time.Unix(1_800_000_000, 0),
	}
}

var simBounds = []float64{10, 25, 50, 75, 100, 150, 200, 250, 300, 400, 500, 750, 1000, 2000, 5000, math.Inf(1)}

// latency of one request at the site's current load.
func (s *site) latency() float64 {
	rho := float64(len(s.sessions)) / s.capacity
	f := 1 / (1 - min(rho, 0.95))
	if rho > 0.95 {
		f *= 1 + 10*(rho-0.95)
	}
	return float64(s.base.Milliseconds()) * f * math.Exp(0.3*s.rng.NormFloat64())
}

// admit lets n people in now.
func (s *site) admit(n int) {
	for range n {
		s.total++
		s.admitted = append(s.admitted, s.now.Add(s.ttl))
		if s.rng.Float64() < s.show {
			d := time.Duration(float64(s.delay) * (0.5 + s.rng.Float64()))
			s.arriving = append(s.arriving, arrival{s.now.Add(d), s.now})
		}
	}
}

// advance runs the site for dt: arrivals, requests, session ends, expiries.
func (s *site) advance(dt time.Duration) {
	s.now = s.now.Add(dt)
	s.arriving = slices.DeleteFunc(s.arriving, func(a arrival) bool {
		if a.at.After(s.now) {
			return false
		}
		s.sessions = append(s.sessions, s.now.Add(time.Duration(float64(s.session)*(0.5+s.rng.Float64()))))
		s.win.Arrivals++
		s.win.ArrivalDelaySumMs += uint64(s.now.Sub(a.admittedAt).Milliseconds())
		s.served++
		return true
	})
	s.sessions = slices.DeleteFunc(s.sessions, func(end time.Time) bool { return !end.After(s.now) })
	s.admitted = slices.DeleteFunc(s.admitted, func(exp time.Time) bool { return !exp.After(s.now) })
	reqs := int(float64(len(s.sessions)) * dt.Seconds() / 2)
	rho := float64(len(s.sessions)) / s.capacity
	for range reqs {
		l := s.latency()
		s.lat = append(s.lat, l)
		s.win.Requests++
		if rho > 1.2 && s.rng.Float64() < 0.1 {
			s.win.Errors++
			s.errs++
		}
		s.observe(l)
	}
	s.win.Window += dt
}

func (s *site) observe(l float64) {
	if s.win.Buckets == nil {
		for _, b := range simBounds {
			s.win.Buckets = append(s.win.Buckets, Bucket{LeMs: b})
		}
	}
	for i, b := range simBounds {
		if l <= b {
			s.win.Buckets[i].Count++
			return
		}
	}
}

// report closes the signal's window, as the kit does.
func (s *site) report() Signal {
	sig := s.win
	sig.At, sig.Active = s.now, int64(len(s.sessions))
	s.win = Signal{}
	return sig
}

// p99 of the requests since from (an index into lat).
func (s *site) p99(from int) time.Duration {
	l := slices.Clone(s.lat[from:])
	if len(l) == 0 {
		return 0
	}
	slices.Sort(l)
	return ms(l[int(0.99*float64(len(l)-1))])
}

// room admits from an endless line at a rate within an allowance, as
// promote does (a token bucket holding one second of rate; allow < 0: none).
type room struct {
	tokens float64
	allow  int64
}

func (r *room) tick(s *site, rate float64, dt time.Duration) {
	r.tokens = min(r.tokens+rate*dt.Seconds(), max(rate, 1))
	n := int(r.tokens)
	if r.allow >= 0 {
		n = min(n, int(r.allow))
	}
	if n > 0 {
		s.admit(n)
		r.tokens -= float64(n)
		if r.allow >= 0 {
			r.allow -= int64(n)
		}
	}
}

// run is one simulated run: every second the room admits and the site
// advances; every two seconds the site reports and (when c is set) the
// controller steps. capOf changes the site's capacity over time (nil: as
// built). It returns the decisions taken and the signals, one per report.
func (s *site) run(c *Controller, fixedRate float64, d time.Duration, capOf func(time.Duration) float64) ([]Decision, []Signal) {
	r := room{allow: -1}
	var out []Decision
	var sigs []Signal
	start := s.now
	rate := fixedRate
	for el := time.Duration(0); el < d; el += time.Second {
		if capOf != nil {
			s.capacity = capOf(el)
		}
		r.tick(s, rate, time.Second)
		s.advance(time.Second)
		if s.now.Sub(start)%(2*time.Second) == 0 {
			sig := s.report()
			sigs = append(sigs, sig)
			if c != nil {
				dec := c.Step(s.now, &sig, Line{AdmittedTotal: s.total})
				rate, r.allow = dec.Rate, dec.Allow
				out = append(out, dec)
			}
		}
	}
	return out, sigs
}
