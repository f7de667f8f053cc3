package shop

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/kit/go/waitroomkit"
)

// Slowness makes the shop as slow as a real site under load, on purpose: a
// request takes Base plus PerSession for every session active on the shop
// (an admission seen within Idle), ±Jitter, while the shop is unhealthy;
// Base alone (±Jitter) once it is healthy again. The steering stack test
// runs the controller against it (docs/steering.md).
type Slowness struct {
	Base, PerSession, Idle time.Duration
	Jitter                 float64 // the share a request's time varies by, uniformly (0.2: ±20%)

	healthy atomic.Bool
	mu      sync.Mutex
	seen    map[string]time.Time // tokenId -> its last request
}

// SetHealthy switches the load's effect off (true) or on (false, the start).
func (s *Slowness) SetHealthy(ok bool) { s.healthy.Store(ok) }

// Active is the number of sessions active at now (sessions idle longer than
// Idle are forgotten).
func (s *Slowness) Active(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.activeLocked(now)
}

func (s *Slowness) activeLocked(now time.Time) int {
	for tok, at := range s.seen {
		if now.Sub(at) > s.Idle {
			delete(s.seen, tok)
		}
	}
	return len(s.seen)
}

// latency marks tokenID's session active at now and returns how long its
// request takes: Base + PerSession × the active sessions while unhealthy.
func (s *Slowness) latency(tokenID string, now time.Time) time.Duration {
	d := s.Base
	s.mu.Lock()
	if s.seen == nil {
		s.seen = map[string]time.Time{}
	}
	if tokenID != "" {
		s.seen[tokenID] = now
	}
	if !s.healthy.Load() {
		d += s.PerSession * time.Duration(s.activeLocked(now))
	}
	s.mu.Unlock()
	return time.Duration(float64(d) * (1 + s.Jitter*(2*rand.Float64()-1)))
}

// Middleware delays each request by the model's latency, then serves it;
// it goes inside the kit's Protect (it needs the admission to count the
// session) and inside Health's middleware (which measures the delay).
func (s *Slowness) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := waitroomkit.FromContext(r.Context())
		t := time.NewTimer(s.latency(a.TokenID, time.Now()))
		defer t.Stop()
		select {
		case <-r.Context().Done():
			return // the visitor left
		case <-t.C:
		}
		next.ServeHTTP(w, r)
	})
}
