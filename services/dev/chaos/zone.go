package chaos

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/waitroom/waitroom/services/dev/cluster"
)

// zoneDown is how long a lost zone stays down before its processes are
// started again: past the consumers' session timeout (6 s), so the
// survivors take the dead consumer's partitions over rather than wait.
const zoneDown = 10 * time.Second

// zoneLoss is the loss of zone z: every process in it killed (-9) at once,
// down for zoneDown, then started again (see cluster.Zones for the layout).
// It runs only when named: every run with it before a nemesis so far saw
// that nemesis fail its maxActive check (RELIABILITY.md, Zones).
func zoneLoss(z string) Fault {
	return Fault{Name: "zone-" + z, Aim: zoneDown + 10*time.Second, named: true,
		What: fmt.Sprintf("kill -9 of every process of zone %s at once (half the api, consumer and notifier replicas, schedulers 1 and 3; with Sentinel the primary Redis and a Sentinel), %s down, restarted", z, zoneDown),
		inject: func(ctx context.Context, c *cluster.Cluster, e env) (time.Time, error) {
			return loseZone(ctx, c, e, z)
		}}
}

// loseZone kills zone z, keeps it down, restarts it, then measures what the
// people saw until service is whole: when the front door answered every
// request again, when admissions came back to the rate people arrive at, and
// when the SSE listeners whose streams the zone's notifiers dropped were back
// on a stream and told their admission. It returns when the zone was
// restarted; it fails when a dropped listener never came back.
func loseZone(ctx context.Context, c *cluster.Cluster, e env, z string) (time.Time, error) {
	fmt.Fprintf(e.out, "chaos: zone-%s: the zones: %s\n", z, strings.ReplaceAll(c.Layout(), "\n", "; "))
	cl := &http.Client{Timeout: requestTimeout}
	tag := fmt.Sprintf("zone-%s-%d", z, time.Now().UnixMilli()%1_000_000)
	holders, err := holdItem(ctx, cl, e.load, c.URL, ZoneItem, tag, int(Policy.MaxActive))
	if err != nil {
		return time.Time{}, err
	}
	if err := listenOn(ctx, e.load, ZoneItem, tag, zoneListeners); err != nil {
		return time.Time{}, err
	}
	pr, err := startFrontProbe(ctx, c.URL)
	if err != nil {
		return time.Time{}, err
	}
	defer pr.stop()
	at := time.Now()
	arriving := e.load.arrivalRate(at, 5*time.Second)
	killed, err := c.KillZone(z)
	if err != nil {
		return time.Time{}, err
	}
	names := make([]string, len(killed))
	for i, p := range killed {
		names[i] = p.Name
	}
	fmt.Fprintf(e.out, "chaos: zone-%s: killed %s (%s)\n", z, strings.Join(names, " "), round(time.Since(at)))
	sleepCtx(ctx, zoneDown)
	if err := c.RestartZone(ctx, killed); err != nil {
		return time.Time{}, err
	}
	restored := time.Now()
	if err := release(ctx, cl, c.URL, ZoneItem, holders); err != nil {
		return restored, err
	}

	// The measures settle once the front door has answered everything for
	// a while, admissions held the rate for a while, and every dropped
	// listener has its ending.
	const limit = 60 * time.Second
	var zr zoneReport
	for deadline := at.Add(limit); ; {
		zr = measureZone(e.load, e.tail, pr, at, arriving)
		if zr.settled(at, restored, time.Now()) || time.Now().After(deadline) {
			break
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return restored, ctx.Err()
		}
	}
	fmt.Fprintf(e.out, "chaos: zone-%s: %s\n", z, zr)
	switch {
	case zr.listenersDropped == 0:
		// Nothing could be shown of the listeners: not a pass.
		return restored, fmt.Errorf("zone-%s: no SSE listener had its stream on the zone's notifiers", z)
	case zr.listenersBack < zr.listenersDropped:
		return restored, fmt.Errorf("zone-%s: %d of %d SSE listeners dropped by the zone not back on a stream within %s",
			z, zr.listenersDropped-zr.listenersBack, zr.listenersDropped, limit)
	}
	return restored, nil
}

// ZoneItem is the item the zone fault holds people waiting on: its
// admitted set is filled by holders who complete only after the zone is back,
// so the listeners behind them wait through the fault on open streams.
const ZoneItem = "chaos-zone"

// zoneListeners is how many people listen on SSE for ZoneItem through the
// fault: the front door spreads them over both zones' notifiers.
const zoneListeners = 12

// holdItem registers n people on item (outside the ledger) and waits until
// each is admitted; it returns their admission tokens. Until they are
// released, item admits no one else.
func holdItem(ctx context.Context, cl *http.Client, ld *load, base, item, tag string, n int) ([]string, error) {
	var urls []string
	for i := range n {
		status, _, err := registerAt(ctx, cl, base, item, fmt.Sprintf("%s-h%d", tag, i))
		if err != nil {
			return nil, err
		}
		urls = append(urls, status)
	}
	tokens := make([]string, len(urls))
	for deadline := time.Now().Add(20 * time.Second); ; {
		held := 0
		for i, u := range urls {
			if tokens[i] != "" {
				held++
				continue
			}
			if code, b, err := ld.status(ctx, u); err == nil && code == http.StatusOK && b.Status == "ADMITTED" {
				tokens[i] = b.AdmissionToken
				held++
			}
		}
		if held == len(urls) {
			return tokens, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("hold %s: %d of %d holders admitted within 20 s", item, held, len(urls))
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

// listenOn starts n people of the load listening on SSE for item (in the
// ledger, so every invariant covers them) and waits until each is in line
// on an open stream.
func listenOn(ctx context.Context, ld *load, item, tag string, n int) error {
	for i := range n {
		ld.join(ctx, item, fmt.Sprintf("%s-l%02d", tag, i), true)
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		open := 0
		for _, p := range ld.all() {
			if p.item == item && strings.HasPrefix(p.user, tag+"-l") && !p.inLine.IsZero() && len(p.opens) > len(p.drops) {
				open++
			}
		}
		if open == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("listen on %s: %d of %d listeners in line on an open stream within 20 s", item, open, n)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// release completes the holders' admissions, as an order service would,
// retrying what is not answered or answered 5xx.
func release(ctx context.Context, cl *http.Client, base, item string, tokens []string) error {
	for _, tok := range tokens {
		body, _ := json.Marshal(map[string]string{"token": tok, "itemId": item})
		for try := 0; ; try++ {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/admissions/complete", strings.NewReader(string(body)))
			req.Header.Set("Content-Type", "application/json")
			resp, err := cl.Do(req)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				if resp.StatusCode < 500 {
					return fmt.Errorf("release a holder of %s: %d %s", item, resp.StatusCode, b)
				}
			}
			if try == 100 {
				return fmt.Errorf("release a holder of %s: no answer in 100 tries", item)
			}
			if !sleepCtx(ctx, 250*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	return nil
}

// zoneReport is what a zone's loss cost the people, measured from the kill.
type zoneReport struct {
	probes, failed int           // front door probes since the kill, and those answered 5xx or not at all
	frontWhole     time.Duration // the end of the last failed probe (0: none failed)
	frontSlowest   time.Duration
	lastFailure    string
	checkedUntil   time.Duration // how far after the kill the probes and the record were read

	arriving  float64       // people per second before the kill
	rateBack  time.Duration // admissions at ≥ 80% of arriving again after the dip (see rateBackAt)
	rateKnown bool
	perSecond []int // admissions in each second from the kill

	listenersDropped, listenersBack, listenersTold, listenersOpen int
	slowestBack                                                   time.Duration
}

// settled: 3 s past the restart and past the last failed probe, the rate
// held, every dropped listener admitted or out of patience.
func (r zoneReport) settled(at, restored, now time.Time) bool {
	return r.rateKnown && r.listenersOpen == 0 && now.Sub(restored) > 3*time.Second &&
		now.Sub(at.Add(r.frontWhole)) > 3*time.Second
}

func (r zoneReport) String() string {
	front := fmt.Sprintf("front door: all %d probes answered, none 5xx (the slowest in %s)", r.probes, round(r.frontSlowest))
	if r.failed > 0 {
		front = fmt.Sprintf("front door: %d of %d probes answered 5xx or not at all (last: %s), every request answered again %s after the kill (the slowest in %s)",
			r.failed, r.probes, r.lastFailure, round(r.frontWhole), round(r.frontSlowest))
	}
	rate := fmt.Sprintf("admissions not back at %.0f/s within %s", 0.8*r.arriving, round(r.checkedUntil))
	if r.rateKnown {
		rate = fmt.Sprintf("admissions back at ≥ 80%% of the %.1f people/s arriving (after their last 2 s under half) %s after the kill", r.arriving, round(r.rateBack))
	}
	return fmt.Sprintf("%s; %s (each second from the kill: %v); %d SSE listeners dropped by the zone's notifiers, %d back on a stream (the slowest %s after the kill), %d told their admission over it",
		front, rate, r.perSecond, r.listenersDropped, r.listenersBack, round(r.slowestBack), r.listenersTold)
}

func measureZone(ld *load, tl *tail, pr *frontProbe, at time.Time, arriving float64) zoneReport {
	now := time.Now()
	r := zoneReport{arriving: arriving, checkedUntil: now.Sub(at)}
	r.probes, r.failed, r.frontWhole, r.frontSlowest, r.lastFailure = pr.since(at)
	// The record is read a moment behind: judge windows that ended 2 s ago.
	ts := tl.admissionTimes(at.Add(-2*time.Second), Items)
	r.rateBack, r.rateKnown = rateBackAt(ts, at, now.Add(-2*time.Second), arriving)
	for _, t := range ts {
		if i := int(t.Sub(at) / time.Second); t.After(at) && t.Before(now.Add(-2*time.Second)) {
			for len(r.perSecond) <= i {
				r.perSecond = append(r.perSecond, 0)
			}
			r.perSecond[i]++
		}
	}
	for _, p := range ld.all() {
		if !p.sse {
			continue
		}
		var drop time.Time
		for _, d := range p.drops {
			// The kill drops the zone's streams at once; a drop later than
			// 2 s after it is some other stream's end.
			if !d.Before(at) && d.Before(at.Add(2*time.Second)) {
				drop = d
				break
			}
		}
		if drop.IsZero() {
			continue
		}
		r.listenersDropped++
		back := false
		for _, o := range p.opens {
			if o.After(drop) {
				back = true
				r.listenersBack++
				r.slowestBack = max(r.slowestBack, o.Sub(at))
				break
			}
		}
		switch {
		case p.via == "sse":
			r.listenersTold++
			if !back { // told on the stream it reopened: that open counts
				r.listenersBack++
			}
		case p.outcome == "":
			r.listenersOpen++
		}
	}
	return r
}

// rateBackAt is when admissions are back at the rate people arrive at:
// from at, the end of the first 2 s window (stepping 100 ms) that admits at
// least 80% of arriving per second after the last window that admitted
// under half (the dip; a window of a steady flow never falls that low, so
// a second's jitter is not taken for one). Known once the record is read 5
// s past it. With no dip it is the first window's end, 2 s. ts are the
// admission times on the record.
func rateBackAt(ts []time.Time, at, until time.Time, arriving float64) (time.Duration, bool) {
	const window, step, hold = 2 * time.Second, 100 * time.Millisecond, 5 * time.Second
	perWindow := arriving * window.Seconds()
	count := func(end time.Time) int {
		n := 0
		for _, t := range ts {
			if t.After(end.Add(-window)) && !t.After(end) {
				n++
			}
		}
		return n
	}
	var back time.Time
	for end := at.Add(window); !end.After(until); end = end.Add(step) {
		switch n := float64(count(end)); {
		case n < 0.5*perWindow:
			back = time.Time{} // in the dip (again)
		case n >= 0.8*perWindow && back.IsZero():
			back = end
		}
	}
	if back.IsZero() || until.Sub(back) < hold {
		return 0, false
	}
	return back.Sub(at), true
}

// admissionTimes are the times of every admission on the record of items
// since from, one per admitted token: the Kafka record's time, not the
// tick's At, which is its scheduler's clock (skewed by WR_CLOCK_OFFSET, so a
// shard handed to a replica ahead would show a gap that was not there).
func (t *tail) admissionTimes(from time.Time, items []string) []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []time.Time
	for _, item := range items {
		for i, ev := range t.ticks[item] {
			if at := t.tickTimes[item][i]; !at.Before(from) {
				for range ev.Admitted {
					out = append(out, at)
				}
			}
		}
	}
	return out
}

// arrivalRate is how many people per second the load started on Items in
// the span before at (shorter when the load is younger).
func (l *load) arrivalRate(at time.Time, span time.Duration) float64 {
	ps := l.all()
	if len(ps) == 0 {
		return 0
	}
	from := at.Add(-span)
	if first := ps[0].t0; first.After(from) {
		from = first
	}
	n := 0
	for _, p := range ps {
		if slices.Contains(Items, p.item) && !p.t0.Before(from) && p.t0.Before(at) {
			n++
		}
	}
	if s := at.Sub(from).Seconds(); s > 0 {
		return float64(n) / s
	}
	return 0
}

// frontProbe asks the front door, every 100 ms on each route, what a
// person's page asks: a registration (on ProbeItem, outside the load's
// ledger) and a status read (to the apis), and an event stream's opening (to
// the notifiers). A probe fails on a 5xx, or no answer within
// requestTimeout. A 4xx is an answer (the probe's admission may end).
type frontProbe struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	results []probeResult
}

type probeResult struct {
	route   string
	start   time.Time
	took    time.Duration
	outcome string // "" when answered 2xx
}

// startFrontProbe registers the probe's person, then probes until stop.
func startFrontProbe(ctx context.Context, base string) (*frontProbe, error) {
	cl := &http.Client{Timeout: requestTimeout}
	user := fmt.Sprintf("zone-probe-%d", time.Now().UnixNano())
	status, events, err := registerAt(ctx, cl, base, ProbeItem, user)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	pr := &frontProbe{cancel: cancel}
	n := 0
	routes := map[string]func(context.Context) (*http.Request, error){
		"register": func(ctx context.Context) (*http.Request, error) {
			n++ // only this route's goroutine touches n
			body := fmt.Sprintf(`{"userId":"%s-%d"}`, user, n)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/items/"+ProbeItem+"/registrations", strings.NewReader(body))
			if err == nil {
				req.Header.Set("Content-Type", "application/json")
			}
			return req, err
		},
		"status": func(ctx context.Context) (*http.Request, error) {
			return http.NewRequestWithContext(ctx, http.MethodGet, base+status, nil)
		},
		"events": func(ctx context.Context) (*http.Request, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+events, nil)
			if err == nil {
				req.Header.Set("Accept", "text/event-stream")
			}
			return req, err
		},
	}
	for route, mk := range routes {
		pr.wg.Add(1)
		go func() {
			defer pr.wg.Done()
			for sleepCtx(ctx, 100*time.Millisecond) {
				pr.once(ctx, cl, route, mk)
			}
		}()
	}
	return pr, nil
}

// once sends one probe; a stream counts as answered once its headers came.
func (pr *frontProbe) once(ctx context.Context, cl *http.Client, route string, mk func(context.Context) (*http.Request, error)) {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := mk(rctx)
	if err != nil {
		return
	}
	r := probeResult{route: route, start: time.Now()}
	resp, err := cl.Do(req)
	r.took = time.Since(r.start)
	if ctx.Err() != nil {
		return // stopped: not the front door's doing
	}
	switch {
	case err != nil:
		r.outcome = route + ": " + err.Error()
	default:
		if route != "events" {
			io.Copy(io.Discard, resp.Body)
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			r.outcome = fmt.Sprintf("%s: %d", route, resp.StatusCode)
		}
	}
	pr.mu.Lock()
	pr.results = append(pr.results, r)
	pr.mu.Unlock()
}

// since sums up the probes sent from at: how many, how many failed, when
// the last failure ended (from at), the slowest answer, the last failure.
func (pr *frontProbe) since(at time.Time) (n, failed int, whole, slowest time.Duration, last string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, r := range pr.results {
		if r.start.Before(at) {
			continue
		}
		n++
		slowest = max(slowest, r.took)
		if r.outcome != "" {
			failed++
			if end := r.start.Add(r.took).Sub(at); end > whole {
				whole, last = end, r.outcome
			}
		}
	}
	return n, failed, whole, slowest, last
}

func (pr *frontProbe) stop() {
	pr.cancel()
	pr.wg.Wait()
}

// registerAt registers user on item through the front door and returns its
// status and events URLs.
func registerAt(ctx context.Context, cl *http.Client, base, item, user string) (status, events string, err error) {
	// One requestId across the tries: a try whose answer was lost must not
	// leave a second place nobody holds (as the load's registrations).
	body := `{"userId":"` + user + `","requestId":"` + rand.Text() + `"}`
	for try := 0; try < 20; try++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/items/"+item+"/registrations",
			strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := cl.Do(req)
		if err == nil {
			var r struct{ StatusURL, EventsURL string }
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusAccepted && json.Unmarshal(b, &r) == nil && r.StatusURL != "" {
				return r.StatusURL, r.EventsURL, nil
			}
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return "", "", ctx.Err()
		}
	}
	return "", "", fmt.Errorf("register %s on %s: no 202 in 20 tries", user, item)
}
