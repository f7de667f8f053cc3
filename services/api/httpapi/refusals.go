package httpapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/foundation/retry"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"go.uber.org/zap"
)

// RefusalStore keeps the refusal counts (*queue.Line).
type RefusalStore interface {
	AddRefused(ctx context.Context, by map[string]map[string]int64) error
}

// Refusals counts, per known item and error code, the registrations this
// replica refused (reject mode, blocks, throttles, proof-of-work, bypass
// codes, closed or sold out), in memory, and adds them to the item's
// refused hash every interval: the operator's console shows them. They are
// telemetry, not the line: a refusal never reaches the record, so a lost
// count is lost (a failed flush keeps its counts for the next one).
type Refusals struct {
	store RefusalStore
	every time.Duration
	log   *zap.Logger

	mu sync.Mutex
	by map[string]map[string]int64
}

// DefaultRefusalFlush is how often refusal counts reach Redis.
const DefaultRefusalFlush = 5 * time.Second

// NewRefusals returns a Refusals flushing to store every interval (0: the
// default).
func NewRefusals(store RefusalStore, every time.Duration, log *zap.Logger) *Refusals {
	if every <= 0 {
		every = DefaultRefusalFlush
	}
	return &Refusals{store: store, every: every, log: log, by: map[string]map[string]int64{}}
}

func (r *Refusals) add(item, code string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count(item, code, 1)
}

// count adds n refusals of item with code. Callers hold r.mu.
func (r *Refusals) count(item, code string, n int64) {
	m := r.by[item]
	if m == nil {
		m = map[string]int64{}
		r.by[item] = m
	}
	m[code] += n
}

// Flush adds the counts so far to the store.
func (r *Refusals) Flush(ctx context.Context) error {
	r.mu.Lock()
	by := r.by
	r.by = map[string]map[string]int64{}
	r.mu.Unlock()
	if err := r.store.AddRefused(ctx, by); err != nil {
		r.mu.Lock()
		for item, codes := range by { // keep them for the next flush
			for code, n := range codes {
				r.count(item, code, n)
			}
		}
		r.mu.Unlock()
		return err
	}
	return nil
}

// Run flushes every interval until ctx ends, then once more.
func (r *Refusals) Run(ctx context.Context) {
	retry.Every(ctx, r.every, true, r.Flush, func(err error, last bool) {
		r.log.Warn("flush refusal counts; kept for the next flush", zap.Bool("stopping", last), zap.Error(err))
	})
}

// countRefusal runs the registration and counts it when it was refused for
// a known item. Malformed requests (400, 413) and unknown items (404) are
// not counted: they name no item an operator runs, and counting them would
// let anyone grow the map.
func (s *Server) countRefusal(c *gin.Context) {
	c.Next()
	if s.opt.Refusals == nil {
		return
	}
	st := c.Writer.Status()
	if st < 400 || st >= 500 || st == http.StatusBadRequest || st == http.StatusNotFound || st == http.StatusRequestEntityTooLarge {
		return
	}
	item := c.Param("itemId")
	if _, known := s.items.Get(item); !known {
		return
	}
	if code := c.GetString(httpserver.ErrorCodeKey); code != "" {
		s.opt.Refusals.add(item, code)
	}
}
