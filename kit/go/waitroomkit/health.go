package waitroomkit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"
)

// The window of a report the api's signal route takes (its
// sitehealth.MinWindow and MaxWindow, restated: the kit depends on nothing
// of waitroom; the dev stack's TestTheKitsHealthReportsPassTheSignalRoute
// holds them together).
const (
	minWindow = 100 * time.Millisecond
	maxWindow = time.Minute
)

// DefaultBoundsMs are the latency buckets Health reports (ms; +Inf beyond).
var DefaultBoundsMs = []float64{5, 10, 25, 50, 75, 100, 150, 200, 300, 400, 500, 750, 1000, 1500, 2000, 3000, 5000, 10000}

// SignalReport is one window of the site's health as the api's signal
// route takes it (POST /api/v1/items/{itemId}/signal).
type SignalReport struct {
	Instance          string    `json:"instance"`
	WindowMs          int64     `json:"windowMs"`
	BoundsMs          []float64 `json:"boundsMs"`
	Counts            []uint64  `json:"counts"`
	Errors            uint64    `json:"errors"`
	Arrivals          uint64    `json:"arrivals"`
	ArrivalDelayMsSum uint64    `json:"arrivalDelayMsSum"`
	Active            int64     `json:"active"`
}

// Health measures what the protected site sees of one item's admitted
// people, and reports it to the room so the scheduler can pace admission
// by it (docs/steering.md): a latency histogram (bucket counts, which add
// across the site's instances; never a percentile), the requests that
// failed (5xx), the admitted people who arrived for the first time and
// their delay since the admission was issued, and the sessions active (an
// admission seen within the idle time). Its Middleware goes inside
// Protect; Run posts a report every interval.
type Health struct {
	k        *Kit
	item     string
	token    string
	instance string
	every    time.Duration
	idle     time.Duration
	bounds   []float64

	mu       sync.Mutex
	counts   []uint64
	errors   uint64
	arrivals uint64
	delaySum uint64
	since    time.Time
	seen     map[string]time.Time // tokenId -> last request
	arrived  map[string]time.Time // tokenId -> admission expiry: counted once as an arrival
}

// HealthOption configures a Health.
type HealthOption func(*Health)

// WithReportEvery sets how often Run posts (default 2 s; 100 ms..60 s).
func WithReportEvery(d time.Duration) HealthOption { return func(h *Health) { h.every = d } }

// WithSessionIdle sets how long after its last request a session stops
// counting as active (default 2 min).
func WithSessionIdle(d time.Duration) HealthOption { return func(h *Health) { h.idle = d } }

// WithInstance names this instance of the site among those reporting the
// item (default: the host name).
func WithInstance(name string) HealthOption { return func(h *Health) { h.instance = name } }

// WithBounds sets the latency buckets, increasing, in ms (at most 63).
func WithBounds(ms []float64) HealthOption { return func(h *Health) { h.bounds = ms } }

// Health returns the health meter of item, reporting with the install's
// signal token (the api's WR_SIGNAL_TOKEN).
func (k *Kit) Health(item, signalToken string, opts ...HealthOption) *Health {
	h := &Health{k: k, item: item, token: signalToken, every: 2 * time.Second, idle: 2 * time.Minute,
		bounds: DefaultBoundsMs, instance: hostname(), seen: map[string]time.Time{}, arrived: map[string]time.Time{}}
	for _, o := range opts {
		o(h)
	}
	h.every = min(max(h.every, minWindow), maxWindow)
	h.counts = make([]uint64, len(h.bounds)+1)
	h.since = k.now()
	return h
}

// Middleware measures every request it wraps; put it inside Protect so it
// knows the admission (a request without one counts in latency and errors
// only).
func (h *Health) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := h.k.now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		a, _ := FromContext(r.Context())
		h.Observe(h.k.now().Sub(start), sw.status >= 500, a)
	})
}

// Observe records one request that took d (failed: a 5xx) for admission
// a (zero: none); for a site that measures its requests itself.
func (h *Health) Observe(d time.Duration, failed bool, a Admission) {
	now := h.k.now()
	ms := float64(d) / float64(time.Millisecond)
	i := 0
	for i < len(h.bounds) && ms > h.bounds[i] {
		i++
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[i]++
	if failed {
		h.errors++
	}
	if a.TokenID == "" {
		return
	}
	h.seen[a.TokenID] = now
	if _, ok := h.arrived[a.TokenID]; !ok {
		h.arrived[a.TokenID] = a.ExpiresAt
		h.arrivals++
		if !a.IssuedAt.IsZero() && now.After(a.IssuedAt) {
			h.delaySum += uint64(now.Sub(a.IssuedAt).Milliseconds())
		}
	}
}

// Report closes the current window and returns it.
func (h *Health) Report() SignalReport {
	now := h.k.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for tok, at := range h.seen {
		if now.Sub(at) > h.idle {
			delete(h.seen, tok)
		}
	}
	for tok, exp := range h.arrived {
		if !exp.IsZero() && now.After(exp) {
			delete(h.arrived, tok) // its admission ended: it cannot come back
		}
	}
	// The api takes a window of minWindow to maxWindow: a tick of Run a
	// little late, or a first report long after Health, is told as maxWindow.
	window := min(max(now.Sub(h.since), minWindow), maxWindow)
	r := SignalReport{Instance: h.instance, WindowMs: window.Milliseconds(), BoundsMs: h.bounds,
		Counts: h.counts, Errors: h.errors, Arrivals: h.arrivals, ArrivalDelayMsSum: h.delaySum, Active: int64(len(h.seen))}
	h.counts, h.errors, h.arrivals, h.delaySum, h.since = make([]uint64, len(h.bounds)+1), 0, 0, 0, now
	return r
}

// Run posts a report every interval until ctx ends. A failed post is
// dropped (the next window carries on); the room holds its last target
// meanwhile, or falls back to the item's static policy.
func (h *Health) Run(ctx context.Context) {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_ = h.Post(ctx, h.Report())
	}
}

// Post sends one report to the api.
func (h *Health) Post(ctx context.Context, r SignalReport) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("waitroomkit: encode signal: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.k.api+"/api/v1/items/"+url.PathEscape(h.item)+"/signal", bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("waitroomkit: signal request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := h.k.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: post signal: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("waitroomkit: post signal: status %d", resp.StatusCode)
	}
	return nil
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// hostname names the instance by default ("site" when unknown).
func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "site"
	}
	if len(h) > 64 {
		h = h[:64]
	}
	return h
}
