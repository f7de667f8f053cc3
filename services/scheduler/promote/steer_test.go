package promote

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/steer"
	"github.com/waitroom/waitroom/pkg/store/sitehealth"
	"github.com/waitroom/waitroom/topics"
)

// fastClock runs the line's time scale times faster than the wall's.
type fastClock struct {
	t0, r0 time.Time
	scale  float64
}

func (c *fastClock) Now() time.Time {
	return c.t0.Add(time.Duration(float64(time.Since(c.r0)) * c.scale))
}

// slowShop is a demo shop made slow on purpose: its latency rises with its
// active sessions (base/(1-ρ), steeper past 0.95, log-normal noise). It
// learns who was admitted from waitroom.admissions, as a site whose kit
// verifies offline sees them arrive: 80% arrive after about delay, the rest
// never come; each stays session, sending a request a second. Every two
// seconds of the line's time it reports its health to the store, as the
// kit does through the api.
type slowShop struct {
	item     string
	clock    func() time.Time
	store    *sitehealth.Store
	rng      *rand.Rand
	delay    time.Duration
	session  time.Duration
	capacity func(el time.Duration) float64 // by time since the shop opened

	mu       sync.Mutex
	arriving map[string]time.Time // token -> when it arrives
	admitted map[string]time.Time // token -> when it was admitted
	sessions map[string]time.Time // token -> when its session ends
	order    []string             // every admitted token, in the order of the record
	reports  []sitehealth.Report
}

var shopBounds = []float64{25, 50, 75, 100, 150, 200, 250, 300, 400, 500, 750, 1000, 2000, 5000}

func (s *slowShop) run(ctx context.Context, t *testing.T, brokers []string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics.Admissions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	go func() { // the record of admissions
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := s.clock()
			s.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				ev, err := topics.DecodeAdmission(r.Value)
				if err != nil || ev.ItemID != s.item || ev.Kind != "" {
					return
				}
				for _, tok := range ev.Admitted {
					if _, dup := s.admitted[tok]; dup {
						continue
					}
					s.admitted[tok] = now
					s.order = append(s.order, tok)
					if s.rng.Float64() < 0.8 {
						s.arriving[tok] = now.Add(time.Duration(float64(s.delay) * (0.5 + s.rng.Float64())))
					}
				}
			})
			s.mu.Unlock()
		}
	}()
	open := s.clock()
	last, win := open, sitehealth.Report{Instance: "shop-1", BoundsMs: shopBounds, Counts: make([]uint64, len(shopBounds)+1)}
	tk := time.NewTicker(25 * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		now := s.clock()
		s.mu.Lock()
		for tok, at := range s.arriving {
			if !at.After(now) {
				delete(s.arriving, tok)
				s.sessions[tok] = now.Add(time.Duration(float64(s.session) * (0.5 + s.rng.Float64())))
				win.Arrivals++
				win.ArrivalDelayMsSum += uint64(now.Sub(s.admitted[tok]).Milliseconds())
			}
		}
		for tok, end := range s.sessions {
			if !end.After(now) {
				delete(s.sessions, tok)
			}
		}
		active := len(s.sessions)
		s.mu.Unlock()
		rho := float64(active) / s.capacity(now.Sub(open))
		f := 1 / (1 - min(rho, 0.95))
		if rho > 0.95 {
			f *= 1 + 10*(rho-0.95)
		}
		for range int(float64(active) * now.Sub(last).Seconds()) {
			l := 40 * f * math.Exp(0.3*s.rng.NormFloat64())
			i := 0
			for i < len(shopBounds) && l > shopBounds[i] {
				i++
			}
			win.Counts[i]++
			if rho > 1.2 && s.rng.Float64() < 0.1 {
				win.Errors++
			}
		}
		win.WindowMs += now.Sub(last).Milliseconds()
		last = now
		if win.WindowMs >= 2000 {
			win.Active, win.At = int64(active), now.UnixMilli()
			if err := s.store.Put(ctx, s.item, &win); err != nil && ctx.Err() == nil {
				t.Errorf("report: %v", err)
			}
			s.mu.Lock()
			s.reports = append(s.reports, win)
			s.mu.Unlock()
			win = sitehealth.Report{Instance: "shop-1", BoundsMs: shopBounds, Counts: make([]uint64, len(shopBounds)+1)}
		}
	}
}

// p95 of the shop's requests between from and to (line time), from its
// reports' merged histograms.
func (s *slowShop) p95(from, to time.Time) (time.Duration, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var m steer.Signal
	for _, r := range s.reports {
		if at := time.UnixMilli(r.At); at.After(from) && !at.After(to) {
			m = steer.Merge(m, r.Signal())
		}
	}
	return m.Quantile(0.95), m.Requests
}

// The steering controller, run by the scheduler on a real Redis and kfake,
// in front of a demo shop made slow on purpose (latency rises with its
// sessions; capacity 200 sessions, halved for two minutes): it brings the
// shop's p95 under the 300 ms target after the spike and holds it there,
// never admits faster than maxRate, settles without oscillating by more
// than 20%, recovers when the shop is healthy again, and the admitted order
// is the line's. The line runs 20 times faster than the wall: 9 minutes of
// it take about 27 s.
func TestSteeringHoldsASlowShopUnderTargetWithinMaxRateInLineOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("27 s of wall time")
	}
	w := newWorld(t)
	const maxRate, minRate, target = 12.0, 0.2, 300 * time.Millisecond
	want := w.fill("slow", 8000, topics.AdmissionPolicy{RatePerSecond: 50, SessionTTLSeconds: 120, MinRate: minRate, MaxRate: maxRate,
		Steer: &topics.SteerPolicy{TargetP95Ms: target.Milliseconds()}})
	clock := &fastClock{t0: time.Now(), r0: time.Now(), scale: 20}
	halved := func(el time.Duration) float64 {
		if el >= 5*time.Minute && el < 7*time.Minute {
			return 100
		}
		return 200
	}
	shop := &slowShop{item: "slow", clock: clock.Now, store: sitehealth.NewStore(w.rdb), rng: rand.New(rand.NewPCG(1, 2)),
		delay: 4 * time.Second, session: 40 * time.Second, capacity: halved,
		arriving: map[string]time.Time{}, admitted: map[string]time.Time{}, sessions: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { shop.run(ctx, t, w.brokers) })
	rep := w.replica(Options{Tick: 100 * time.Millisecond, Burst: 2 * time.Second, Clock: clock.Now,
		Steer: SteerOptions{Every: 100 * time.Millisecond, MinStep: 5 * time.Second, SignalTimeout: 30 * time.Second}})
	wg.Go(func() { _ = rep.Run(ctx) })
	open := clock.Now()
	for clock.Now().Sub(open) < 9*time.Minute {
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	wg.Wait()

	// The decisions, from the record.
	var ds []topics.AdmissionEvent
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.ConsumeTopics(topics.Admissions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer rcancel()
	var ticks []topics.AdmissionEvent
	for rctx.Err() == nil {
		cl.PollFetches(rctx).EachRecord(func(r *kgo.Record) {
			ev, err := topics.DecodeAdmission(r.Value)
			require.NoError(t, err)
			switch {
			case ev.ItemID != "slow":
			case ev.Kind == topics.KindSteer:
				ds = append(ds, ev)
			case ev.Kind == "":
				ticks = append(ticks, ev)
			}
		})
	}
	require.NotEmpty(t, ds, "no steering decision recorded")
	at := func(ev topics.AdmissionEvent) time.Duration { return time.UnixMilli(ev.At).Sub(open) }

	// Order: what the shop saw admitted is the front of the line, in order.
	shop.mu.Lock()
	order := shop.order
	shop.mu.Unlock()
	require.NotEmpty(t, order)
	assert.Equal(t, want[:len(order)], order, "admitted in the line's order")

	// Never faster than maxRate: each decision's rate, and the admissions of
	// every 20 s of line time (plus one burst of 2 s).
	for _, d := range ds {
		require.LessOrEqual(t, d.Steer.Rate, maxRate, "decision at %v", at(d))
		require.GreaterOrEqual(t, d.Steer.Rate, minRate, "decision at %v", at(d))
	}
	perWindow := map[int]int{}
	for _, ev := range ticks {
		perWindow[int(at(ev)/(20*time.Second))] += len(ev.Admitted)
	}
	for win, n := range perWindow {
		assert.LessOrEqual(t, float64(n), maxRate*22, "window %d admitted %d", win, n)
	}

	// The spike starts at 0: p95 under target in every 30 s from minute 2;
	// settled (minute 4 to 5, once the ramp from a target of 10 is done),
	// the target within 20% of its mean.
	// Loose bounds for a noisy shop: the p95 of the whole span under
	// target, and of every 30 s of it under 1.25 times the target.
	window := func(from, to time.Duration) {
		t.Helper()
		p, _ := shop.p95(open.Add(from), open.Add(to))
		assert.LessOrEqual(t, p, target, "p95 in [%v, %v)", from, to)
		for lo := from; lo < to; lo += 30 * time.Second {
			p, n := shop.p95(open.Add(lo), open.Add(lo+30*time.Second))
			assert.Positive(t, n, "no requests in [%v, +30s)", lo)
			assert.LessOrEqual(t, p, target*5/4, "p95 in [%v, +30s)", lo)
		}
	}
	window(2*time.Minute, 5*time.Minute)
	var settled []int64
	for _, d := range ds {
		if a := at(d); a >= 4*time.Minute && a < 5*time.Minute {
			settled = append(settled, d.Steer.Target)
		}
	}
	require.NotEmpty(t, settled)
	var sum float64
	for _, v := range settled {
		sum += float64(v)
	}
	mean := sum / float64(len(settled))
	for _, v := range settled {
		assert.InDelta(t, mean, float64(v), 0.2*mean, "settled target %v off its mean %.0f by more than 20%%", v, mean)
	}
	// The shop halves at minute 5: back within 90 s (sessions admitted
	// before cannot be un-admitted; they end within 60 s), by the rule for
	// any 30 s above, under 1.25 times the target. The controller may probe
	// a bigger target in those 30 s, and a probe overshoots for a moment
	// (a fresh-clone CI read 347 ms there, the probe to 91 at 6m20s).
	p, n := shop.p95(open.Add(6*time.Minute+30*time.Second), open.Add(7*time.Minute))
	assert.Positive(t, n, "no requests in [6m30s, 7m)")
	assert.LessOrEqual(t, p, target*5/4, "p95 in [6m30s, 7m)")
	// Healthy again at minute 7: the target grows back.
	last := func(before time.Duration) int64 {
		var v int64
		for _, d := range ds {
			if at(d) < before {
				v = d.Steer.Target
			}
		}
		return v
	}
	assert.Greater(t, last(9*time.Minute), last(7*time.Minute)*3/2, "the target grows back once the shop is healthy")
	if t.Failed() { // the decisions, to read what happened
		for _, d := range ds {
			if a := at(d); a >= 2*time.Minute && a < 7*time.Minute {
				t.Logf("%v target %d allow %d rate %.2f p95 %.0f ms site %d show %.2f: %s", a.Round(time.Second), d.Steer.Target,
					d.Steer.Allow, d.Steer.Rate, d.Steer.P95Ms, d.Steer.SiteActive, d.Steer.ShowRatio, d.Steer.Reason)
			}
		}
	}
	t.Logf("settled target mean %.0f; target at 7 min %d, at 9 min %d; %d decisions, %d admitted", mean, last(7*time.Minute),
		last(9*time.Minute), len(ds), len(order))
}
