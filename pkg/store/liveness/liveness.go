// Package liveness collects the signs of life of waiting places (a status
// poll, an open event stream) in memory and flushes them to the items' Seen
// sets in Redis every so often, one pipelined ZADD per item, so the
// scheduler's idle sweep can release the places nobody watches any more
// (issue 16: abandoned places). The api and the notifier both use it.
package liveness

import (
	"context"
	"sync"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/foundation/retry"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"go.uber.org/zap"
)

// DefaultFlush is how often signs of life reach Redis (WR_SEEN_FLUSH). The
// sweep allows for it: a place is released only once it has been idle for
// the item's timeout plus one flush interval.
const DefaultFlush = 5 * time.Second

// Store records signs of life (*queue.Line).
type Store interface {
	MarkSeen(ctx context.Context, seen []queue.SeenAt, nx bool) error
}

// Counts reports whether an answer of status is one whose holder's poll or
// stream is a sign of life: a place not yet final (pending, pre-queued,
// waiting).
func Counts(status string) bool {
	switch status {
	case registration.StatusPending, registration.StatusWaiting, registration.StatusPreQueue:
		return true
	}
	return false
}

// Tracker keeps the signs of life of one process until its next flush.
type Tracker struct {
	store   Store
	every   time.Duration
	tracked func(item string) bool
	now     func() time.Time
	log     *zap.Logger

	mu      sync.Mutex
	touched map[string]map[string]int64 // item -> member -> last sign (unix ms)
	held    map[string]map[string]int   // item -> member -> open streams
}

// New returns a tracker flushing to store every `every` (<= 0: DefaultFlush);
// tracked says which items keep signs of life (those with an idleTimeout):
// the others' are dropped at the flush.
func New(store Store, every time.Duration, tracked func(item string) bool, log *zap.Logger) *Tracker {
	if every <= 0 {
		every = DefaultFlush
	}
	return &Tracker{store: store, every: every, tracked: tracked, now: time.Now, log: log,
		touched: map[string]map[string]int64{}, held: map[string]map[string]int{}}
}

// Every is the flush interval.
func (t *Tracker) Every() time.Duration { return t.every }

// Touch records a sign of life of the place of tokenID, kept under key
// (topics.PlaceKey), at at: a poll. It costs a map write; Redis hears of it
// at the next flush.
func (t *Tracker) Touch(item, tokenID, key string, at time.Time) {
	if t == nil {
		return
	}
	t.touch(item, queue.SeenMember(tokenID, key), at.UnixMilli())
}

func (t *Tracker) touch(item, member string, ms int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.touched[item]
	if m == nil {
		m = map[string]int64{}
		t.touched[item] = m
	}
	if ms > m[member] {
		m[member] = ms
	}
}

// Hold counts the place alive at every flush until release is called (an
// open event stream); release records the moment it ended as its last sign.
func (t *Tracker) Hold(item, tokenID, key string) (release func()) {
	if t == nil {
		return func() {}
	}
	member := queue.SeenMember(tokenID, key)
	t.mu.Lock()
	m := t.held[item]
	if m == nil {
		m = map[string]int{}
		t.held[item] = m
	}
	m[member]++
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			if m := t.held[item]; m != nil {
				if m[member]--; m[member] <= 0 {
					delete(m, member)
					if len(m) == 0 {
						delete(t.held, item)
					}
				}
			}
			t.mu.Unlock()
			t.touch(item, member, t.now().UnixMilli())
		})
	}
}

// Flush writes the signs of life since the last flush (polls at their time,
// held streams at now) to Redis in one pipeline; on failure they are kept for
// the next one.
func (t *Tracker) Flush(ctx context.Context) error {
	now := t.now().UnixMilli()
	t.mu.Lock()
	touched := t.touched
	t.touched = map[string]map[string]int64{}
	var seen []queue.SeenAt
	for item, m := range t.held {
		if !t.tracked(item) {
			continue
		}
		for member := range m {
			seen = append(seen, queue.SeenAt{Item: item, Member: member, AtMs: now})
		}
	}
	t.mu.Unlock()
	for item, m := range touched {
		if !t.tracked(item) {
			continue
		}
		for member, ms := range m {
			seen = append(seen, queue.SeenAt{Item: item, Member: member, AtMs: ms})
		}
	}
	if err := t.store.MarkSeen(ctx, seen, false); err != nil {
		for item, m := range touched { // keep them for the next flush
			for member, ms := range m {
				t.touch(item, member, ms)
			}
		}
		return err
	}
	return nil
}

// Run flushes every interval until ctx ends, then once more (briefly), so a
// graceful stop loses no sign of life.
func (t *Tracker) Run(ctx context.Context) {
	retry.Every(ctx, t.every, true, t.Flush, func(err error, last bool) {
		if last {
			t.log.Warn("flush signs of life at stop", zap.Error(err))
		} else {
			t.log.Warn("flush signs of life; kept for the next flush", zap.Error(err))
		}
	})
}
