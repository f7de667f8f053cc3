package httpapi

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// heldLine is a real queue.Line whose Motion reads are counted and wait
// until the test opens gate: a Redis read that takes as long as the test
// wants.
type heldLine struct {
	Line
	calls atomic.Int32
	gate  chan struct{}
}

func (l *heldLine) Motion(ctx context.Context, item string) (line.Motion, error) {
	l.calls.Add(1)
	select {
	case <-l.gate:
	case <-ctx.Done():
		return line.Motion{}, ctx.Err()
	}
	return l.Line.Motion(ctx, item)
}

// An item's readers share one Motion read; while the last read is fresh
// nobody waits for the next one (started in the background past half of
// fresh); past fresh they wait for it rather than answer from the old one.
func TestMotionReadIsSharedAndNeverWaitedForWhileFresh(t *testing.T) {
	line := &heldLine{Line: queue.New(testenv.Redis(t)), gate: make(chan struct{})}
	const fresh = time.Second
	p := newPositions(line, nil, fresh, time.Minute, 1000, 5*time.Second)
	t0 := time.Now()
	var clock atomic.Pointer[time.Time]
	clock.Store(&t0)
	p.now = func() time.Time { return *clock.Load() }
	ctx := context.Background()

	// Nothing read yet: 8 readers wait for one read.
	var wg sync.WaitGroup
	var answered atomic.Int32
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, ok := p.motion(ctx, "drop", view.ItemGen{}, t0); ok {
				answered.Add(1)
			}
		}()
	}
	require.Eventually(t, func() bool { return line.calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond) // the others are waiting, not reading
	assert.Equal(t, int32(1), line.calls.Load(), "one read for every reader")
	assert.Equal(t, int32(0), answered.Load(), "nobody answered before the first read")
	close(line.gate)
	wg.Wait()
	assert.Equal(t, int32(8), answered.Load())

	// Past half of fresh, with the next read held: answered at once from the
	// last read, and one read started in the background.
	line.gate = make(chan struct{})
	mid := t0.Add(fresh * 3 / 4)
	for range 5 {
		start := time.Now()
		_, ok := p.motion(ctx, "drop", view.ItemGen{}, mid)
		assert.True(t, ok)
		assert.Less(t, time.Since(start), 100*time.Millisecond, "a fresh answer does not wait for Redis")
	}
	require.Eventually(t, func() bool { return line.calls.Load() == 2 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, int32(2), line.calls.Load(), "one background read for the five")

	// Past fresh while that read is still held (late): answered at once from
	// the last read until fresh+timeout after it was sent, then a reader
	// waits for it.
	for _, d := range []time.Duration{fresh + time.Millisecond, fresh + 5*time.Second - time.Millisecond} {
		start := time.Now()
		_, ok := p.motion(ctx, "drop", view.ItemGen{}, t0.Add(d))
		assert.True(t, ok)
		assert.Less(t, time.Since(start), 100*time.Millisecond, "%s after the last read was sent, the next one late: answered from the last", d)
	}
	tooLate := t0.Add(fresh + 5*time.Second)
	late := make(chan bool, 1)
	go func() {
		_, ok := p.motion(ctx, "drop", view.ItemGen{}, tooLate)
		late <- ok
	}()
	select {
	case <-late:
		t.Fatal("a stale answer was given past fresh+timeout")
	case <-time.After(50 * time.Millisecond):
	}
	clock.Store(&tooLate)
	close(line.gate)
	assert.True(t, <-late, "answered by the shared read")
	assert.Equal(t, int32(2), line.calls.Load(), "the waiting reader joined the read in flight")

	// Past fresh with no read under way (nobody read in the second half of
	// fresh): the read started then is not late, and every reader waits for it.
	line.gate = make(chan struct{})
	stale := tooLate.Add(fresh + time.Millisecond)
	clock.Store(&stale)
	waits := make(chan bool, 2)
	for range 2 {
		go func() {
			_, ok := p.motion(ctx, "drop", view.ItemGen{}, stale)
			waits <- ok
		}()
	}
	require.Eventually(t, func() bool { return line.calls.Load() == 3 }, 5*time.Second, time.Millisecond)
	select {
	case <-waits:
		t.Fatal("answered from a stale read while the read started past fresh was under way")
	case <-time.After(50 * time.Millisecond):
	}
	close(line.gate)
	assert.True(t, <-waits)
	assert.True(t, <-waits)
	assert.Equal(t, int32(3), line.calls.Load(), "one read for both")
}

// A fresh answer takes no lock: with the item's motion lock and the items'
// lock held (as by a reader the kernel has descheduled), readers of a fresh
// motion still answer, both before half of fresh and past it while the next
// read is under way; only a reader that must start or wait for a read takes
// the lock.
func TestFreshMotionAnswersWhileItsLockIsHeld(t *testing.T) {
	line := &heldLine{Line: queue.New(testenv.Redis(t)), gate: make(chan struct{})}
	close(line.gate)
	const fresh = time.Second
	p := newPositions(line, nil, fresh, time.Minute, 1000, 5*time.Second)
	t0 := time.Now()
	p.now = func() time.Time { return t0 }
	ctx := context.Background()
	_, ok := p.motion(ctx, "drop", view.ItemGen{}, t0)
	require.True(t, ok, "the first read")

	answers := func(now time.Time) bool {
		done := make(chan bool, 1)
		go func() {
			_, ok := p.motion(ctx, "drop", view.ItemGen{}, now)
			done <- ok
		}()
		select {
		case ok := <-done:
			return ok
		case <-time.After(time.Second):
			return false
		}
	}
	mo := p.itemMotion("drop")
	held := func(f func()) {
		p.mu.Lock()
		mo.mu.Lock()
		defer p.mu.Unlock()
		defer mo.mu.Unlock()
		f()
	}
	held(func() {
		assert.True(t, answers(t0.Add(fresh/4)), "fresh: answered without the locks")
	})

	line.gate = make(chan struct{}) // the next read is held in Redis
	_, ok = p.motion(ctx, "drop", view.ItemGen{}, t0.Add(fresh*3/4))
	require.True(t, ok, "past half of fresh: answered, the next read started")
	require.Eventually(t, func() bool { return line.calls.Load() == 2 }, 5*time.Second, time.Millisecond)
	held(func() {
		assert.True(t, answers(t0.Add(fresh*3/4)), "the next read under way: answered without the locks")
	})
	close(line.gate)
}
