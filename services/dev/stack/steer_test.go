package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/kit/go/waitroomkit"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/services/dev/shop"
	"github.com/waitroom/waitroom/services/dev/stack"
	"github.com/waitroom/waitroom/topics"
)

// The steering test's time runs about six times faster than a site's:
// sessions of 4–8 s (not 40 s) and an admission's delay to the shop of
// about a second; a health report every second and a controller step of
// at least 2 s (not 2 s and 5 s: measured over fewer requests, the shop's
// p95 would be too noisy on a loaded machine); "within 2 minutes" is
// within 20 s.
const (
	steerSignalToken = "stack-test-signal-token"
	steerTarget      = time.Second
	steerMaxRate     = 20.0
	steerMinRate     = 0.5
	steerSession     = 6 * time.Second
	steerThink       = 700 * time.Millisecond
	steerIdle        = 2500 * time.Millisecond // a session's requests are less apart
	steerPeople      = 1500
	steerSpikeHold   = 20 * time.Second // "2 minutes", scaled
	steerSettledFrom = 40 * time.Second
	steerHealthyAt   = 70 * time.Second
	steerEnd         = 100 * time.Second
)

// The whole loop on the dev stack (api, consumer, three schedulers,
// notifier, kfake, a real redis-server): the demo shop, made slow on
// purpose (a request takes 100 ms + 10 ms for each session active on it,
// ±20%: about 55 sessions at the target), served over HTTP behind the kit, reports its health through the
// kit's Health middleware to the api's signal route; the leading
// scheduler's controller paces admission by it. A spike of 1500 people
// registers at once; each admitted visitor browses the shop for a session
// and buys. The controller holds the shop's p95 (as the visitors measure
// it) under the 1 s target from 20 s after the spike ("2 minutes",
// scaled), never admits faster than maxRate, settles without its target
// swinging more than 20%, grows back once the shop is healthy again, and
// admits in the line's order (the chaos checker's order invariant, on the
// record). About 2 minutes of wall time: it runs with WR_TEST_STEER=1 (make
// steer-stack), not in make test.
func TestSteeringHoldsTheSlowDemoShopUnderTargetOverTheSignalRoute(t *testing.T) {
	if testing.Short() || os.Getenv("WR_TEST_STEER") == "" {
		t.Skip("about 2 minutes of wall time: WR_TEST_STEER=1 runs it (make steer-stack)")
	}
	it := item("slow")
	it.Policy = topics.AdmissionPolicy{RatePerSecond: 50, MaxActive: 300, SessionTTLSeconds: 60,
		MinRate: steerMinRate, MaxRate: steerMaxRate, Steer: &topics.SteerPolicy{TargetP95Ms: steerTarget.Milliseconds()}}
	e := newEnv(t, it)
	e.startWith(func(o *stack.Options) {
		o.SignalToken, o.SteerEvery, o.SteerMinStep = steerSignalToken, 200*time.Millisecond, 2*time.Second
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	slow := &shop.Slowness{Base: 100 * time.Millisecond, PerSession: 10 * time.Millisecond, Idle: steerIdle, Jitter: 0.2}
	c := newCrowd(ctx, t, e, slow)
	line := c.registerAll("slow", steerPeople)
	t0 := time.Now() // the spike: everybody is in line
	var wg sync.WaitGroup
	wg.Go(func() { c.admitInOrder(ctx, "slow", line) })
	time.Sleep(time.Until(t0.Add(steerHealthyAt)))
	slow.SetHealthy(true)
	time.Sleep(time.Until(t0.Add(steerEnd)))
	cancel()
	wg.Wait()
	c.visits.Wait()

	rec := readSteerRecord(t, e, "slow")
	at := func(ms int64) time.Duration { return time.UnixMilli(ms).Sub(t0) }
	defer func() { // the decisions, to read what happened
		if t.Failed() {
			for _, d := range rec.decisions {
				t.Logf("%5.1fs target %3d allow %3d rate %5.2f p95 %4.0f ms site %3d: %s", at(d.At).Seconds(), d.Steer.Target,
					d.Steer.Allow, d.Steer.Rate, d.Steer.P95Ms, d.Steer.SiteActive, d.Steer.Reason)
			}
		}
	}()

	// The signal came over the route: the controller moved on it.
	moved := 0
	for _, d := range rec.decisions {
		if !d.Steer.Static && (strings.HasPrefix(d.Steer.Reason, "grow") || strings.HasPrefix(d.Steer.Reason, "shrink")) {
			moved++
		}
	}
	require.Positive(t, moved, "the controller never moved on the shop's signal")

	// Order: what was admitted, on the record, is the front of the line.
	require.Greater(t, len(rec.admitted), 200, "too few admitted to judge")
	require.LessOrEqual(t, len(rec.admitted), len(rec.line))
	assert.Equal(t, rec.line[:len(rec.admitted)], rec.admitted, "admitted in the line's order")

	// Never faster than maxRate: each decision's rate, and the admissions
	// of every 5 s (plus the one-second burst the budget may hold).
	for _, d := range rec.decisions {
		assert.LessOrEqual(t, d.Steer.Rate, steerMaxRate, "decision at %v", at(d.At))
	}
	perWindow := map[int]int{}
	for _, ev := range rec.ticks {
		perWindow[int(math.Floor(at(ev.At).Seconds()/5))] += len(ev.Admitted) // admissions start before t0
	}
	for w, n := range perWindow {
		assert.LessOrEqual(t, float64(n), steerMaxRate*(5+1)+1, "admitted %d in [%v, +5s)", n, time.Duration(w)*5*time.Second)
	}

	// Under target from 20 s after the spike until the shop is healthy:
	// the whole span's p95 under target, every 10 s of it under 1.25 times
	// the target (loose bounds: 2 shared cores, a soak beside).
	c.underTarget(t0, steerSpikeHold, steerHealthyAt)

	// Settled (from 40 s until healthy): the target within 20% of its mean.
	settled := targetsIn(rec.decisions, at, steerSettledFrom, steerHealthyAt)
	require.NotEmpty(t, settled)
	mean := 0.0
	for _, v := range settled {
		mean += float64(v) / float64(len(settled))
	}
	for _, v := range settled {
		assert.InDelta(t, mean, float64(v), 0.2*mean, "settled target %d off its mean %.1f by more than 20%%", v, mean)
	}

	// Healthy again: the target grows past 1.5 times its settled mean,
	// more people go through than in the same time settled, and p95 stays
	// under target.
	peak := slices.Max(targetsIn(rec.decisions, at, steerHealthyAt, steerEnd))
	assert.GreaterOrEqual(t, float64(peak), 1.5*mean, "the target grows back once the shop is healthy")
	slowN, healthyN := 0, 0
	for _, ev := range rec.ticks {
		switch a := at(ev.At); {
		case a >= steerHealthyAt-15*time.Second && a < steerHealthyAt:
			slowN += len(ev.Admitted)
		case a >= steerEnd-15*time.Second && a < steerEnd:
			healthyN += len(ev.Admitted)
		}
	}
	assert.Greater(t, float64(healthyN), 1.3*float64(slowN), "admitted in the last 15 s slow vs healthy")
	c.underTarget(t0, steerHealthyAt, steerEnd)
	p1, n1 := c.p95(t0, steerSpikeHold, steerHealthyAt)
	p2, n2 := c.p95(t0, steerHealthyAt, steerEnd)
	t.Logf("p95 %v slow (%d requests from %v), %v healthy (%d); settled target mean %.1f (%d..%d), healthy peak %d; admitted %d in 15 s slow, %d healthy; %d decisions, %d admitted, %d requests failed",
		p1, n1, steerSpikeHold, p2, n2, mean, slices.Min(settled), slices.Max(settled), peak, slowN, healthyN, len(rec.decisions), len(rec.admitted), c.failed())
}

// sample is one request of a visitor to the shop.
type sample struct {
	at time.Time
	d  time.Duration
	ok bool
}

// crowd is the spike's people: registered at once, each admitted one
// browsing the shop for a session, then buying.
type crowd struct {
	t      *testing.T
	e      *env
	shop   string
	client *http.Client
	visits sync.WaitGroup

	mu      sync.Mutex
	samples []sample
}

// newCrowd serves the demo shop, slowed by slow and reporting its health
// through the kit until ctx ends, and returns the crowd that visits it.
func newCrowd(ctx context.Context, t *testing.T, e *env, slow *shop.Slowness) *crowd {
	kit, err := waitroomkit.New(e.stack.APIURL)
	require.NoError(t, err)
	health := kit.Health("slow", steerSignalToken, waitroomkit.WithInstance("shop-1"),
		waitroomkit.WithReportEvery(time.Second), waitroomkit.WithSessionIdle(steerIdle), waitroomkit.WithBounds(steerBounds()))
	site := httptest.NewServer(shop.New(kit, shop.WithSlowness(slow), shop.WithHealth(health)))
	t.Cleanup(site.Close)
	// The route takes the kit's reports (Run drops a refused one silently).
	require.NoError(t, health.Post(ctx, health.Report()))
	go health.Run(ctx)
	return &crowd{t: t, e: e, shop: site.URL, client: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 200}}}
}

// steerBounds are the shop's latency buckets: 50 ms wide up to 2 s (a
// site chooses its own; the kit's default ones are 500 ms wide around the
// target), coarser beyond.
func steerBounds() []float64 {
	var b []float64
	for ms := 50.0; ms <= 2000; ms += 50 {
		b = append(b, ms)
	}
	return append(b, 3000, 5000, 10000)
}

// registerAll registers n people for item, 16 at a time, and returns their
// places in line order (by offset), each TokenID holding the raw token.
func (c *crowd) registerAll(item string, n int) []token.Queue {
	regs := make([]token.Queue, n)
	raw := make(map[string]string, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				r, err := c.register(item, fmt.Sprintf("u%04d", i))
				if err == nil {
					var q token.Queue
					if q, err = c.e.signer.ParseQueue(r.Token); err == nil {
						mu.Lock()
						regs[i], raw[q.TokenID] = q, r.Token
						mu.Unlock()
					}
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(c.t, err)
	}
	sort.Slice(regs, func(i, j int) bool { return regs[i].Offset < regs[j].Offset })
	for i := range regs {
		regs[i].TokenID = raw[regs[i].TokenID]
	}
	return regs
}

func (c *crowd) register(item, user string) (httpapi.RegisterResponse, error) {
	var r httpapi.RegisterResponse
	resp, err := c.e.http.Post(c.e.stack.APIURL+"/api/v1/items/"+item+"/registrations", "application/json",
		strings.NewReader(`{"userId":"`+user+`"}`))
	if err != nil {
		return r, fmt.Errorf("register %s: %w", user, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		return r, fmt.Errorf("register %s: %d %s %v", user, resp.StatusCode, b, err)
	}
	return r, json.Unmarshal(b, &r)
}

// admitInOrder reads the status of the first of the line not yet admitted
// (the line admits in order; the record checks it) every 100 ms, and sends
// each admitted visitor into the shop, until ctx ends.
func (c *crowd) admitInOrder(ctx context.Context, item string, line []token.Queue) {
	next := 0
	for ctx.Err() == nil && next < len(line) {
		st, _, err := c.e.poll(item, line[next].TokenID)
		if err == nil && st.Status == "ADMITTED" {
			session := steerSession * time.Duration(2+next%3) / 3 // 4, 6 or 8 s
			c.visits.Go(func() { c.visit(ctx, item, st.AdmissionToken, session) })
			next++
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// visit browses the shop with admission for session (a page, a pause),
// then buys; every request is a sample.
func (c *crowd) visit(ctx context.Context, item, admission string, session time.Duration) {
	end := time.Now().Add(session)
	for time.Now().Before(end) {
		if !c.request(ctx, http.MethodGet, "/shop/"+item, admission) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(steerThink):
		}
	}
	c.request(ctx, http.MethodPost, "/shop/"+item+"/buy", admission)
}

// request sends one request to the shop and keeps its time; false once ctx ended.
func (c *crowd) request(ctx context.Context, method, path, admission string) bool {
	req, err := http.NewRequestWithContext(ctx, method, c.shop+path, nil)
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+admission)
	start := time.Now()
	resp, err := c.client.Do(req)
	if err != nil {
		return ctx.Err() == nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.mu.Lock()
	c.samples = append(c.samples, sample{at: start, d: time.Since(start), ok: resp.StatusCode == http.StatusOK})
	c.mu.Unlock()
	return true
}

func (c *crowd) failed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.samples {
		if !s.ok {
			n++
		}
	}
	return n
}

// p95 of the requests that started in [from, to) after t0, and how many.
func (c *crowd) p95(t0 time.Time, from, to time.Duration) (time.Duration, int) {
	c.mu.Lock()
	var ds []time.Duration
	for _, s := range c.samples {
		if a := s.at.Sub(t0); a >= from && a < to {
			ds = append(ds, s.d)
		}
	}
	c.mu.Unlock()
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[int(math.Ceil(0.95*float64(len(ds))))-1], len(ds)
}

// underTarget asserts the shop's p95 in [from, to) under the target, and
// in every 10 s of it under 1.25 times the target.
func (c *crowd) underTarget(t0 time.Time, from, to time.Duration) {
	c.t.Helper()
	p, n := c.p95(t0, from, to)
	require.Positive(c.t, n, "no requests in [%v, %v)", from, to)
	assert.LessOrEqual(c.t, p, steerTarget, "p95 in [%v, %v) over %d requests", from, to, n)
	for lo := from; lo < to; lo += 10 * time.Second {
		p, n := c.p95(t0, lo, min(lo+10*time.Second, to))
		assert.Positive(c.t, n, "no requests in [%v, +10s)", lo)
		assert.LessOrEqual(c.t, p, steerTarget*5/4, "p95 in [%v, +10s) over %d requests", lo, n)
	}
}

// steerRecord is what waitroom.registrations and waitroom.admissions hold
// of one item.
type steerRecord struct {
	line      []string // tokenIds: each place's first registration, in offset order
	admitted  []string // tokenIds, each first admission in record order
	ticks     []topics.AdmissionEvent
	decisions []topics.AdmissionEvent // kind steer
}

// readSteerRecord reads both topics to their ends, as the chaos checker
// does: the line is each place's first registration in offset order.
func readSteerRecord(t *testing.T, e *env, item string) steerRecord {
	var r steerRecord
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := []kgo.Opt{kgo.SeedBrokers(e.brokers...)}
	places := map[string]bool{}
	require.NoError(t, kclient.ReadToEnd(ctx, base, topics.Registrations, func(rec *kgo.Record) error {
		ev, err := topics.DecodeRegistration(rec.Value)
		if err != nil {
			return err
		}
		if ev.ItemID == item && ev.Kind == topics.KindRegister && !places[ev.PlaceKey()] {
			places[ev.PlaceKey()] = true
			r.line = append(r.line, ev.TokenID)
		}
		return nil
	}))
	seen := map[string]bool{}
	require.NoError(t, kclient.ReadToEnd(ctx, base, topics.Admissions, func(rec *kgo.Record) error {
		ev, err := topics.DecodeAdmission(rec.Value)
		switch {
		case err != nil:
			return err
		case ev.ItemID != item:
		case ev.Kind == topics.KindSteer:
			r.decisions = append(r.decisions, ev)
		case ev.Kind == "":
			r.ticks = append(r.ticks, ev)
			for _, tok := range ev.Admitted {
				if !seen[tok] {
					seen[tok] = true
					r.admitted = append(r.admitted, tok)
				}
			}
		}
		return nil
	}))
	require.NotEmpty(t, r.decisions, "no steering decision on the record")
	return r
}

// targetsIn are the targets the controller decided in [from, to).
func targetsIn(ds []topics.AdmissionEvent, at func(int64) time.Duration, from, to time.Duration) []int64 {
	var out []int64
	for _, d := range ds {
		if a := at(d.At); a >= from && a < to && !d.Steer.Static {
			out = append(out, d.Steer.Target)
		}
	}
	return out
}
