package sse

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A wave wakes the next slice only once the streams it woke in the previous
// one were scheduled (left their wait).
func TestWavesWakeSliceBySlice(t *testing.T) {
	w := &waves{patience: time.Hour}
	a, b := w.slot(), w.slot()
	require.NotEqual(t, a, b)
	ga, gb := w.enter(a), w.enter(b)
	w.wake(1, false)
	<-ga.ch // the first slice at once
	select {
	case <-gb.ch:
		t.Fatal("the second slice was woken before the first one's stream left its wait")
	default:
	}
	ga.leave()
	<-gb.ch
	gb.leave()
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.running
	}, 10*time.Second, time.Millisecond, "the wave ends")

	// A slice nobody waits on is passed over; whoever enters it later sees
	// the newer generation by comparing (as the streams do).
	gc := w.enter(w.slot())
	w.wake(2, false)
	<-gc.ch
	gc.leave()
}

// However streams and generations interleave, every stream ends up seeing
// the newest generation, woken or by comparing before it waits.
func TestWavesMissNobody(t *testing.T) {
	const streams, gens = 2000, 30
	var w waves
	var gen atomic.Uint64
	var wg sync.WaitGroup
	for range streams {
		slot := w.slot()
		wg.Go(func() {
			var seen uint64
			for seen < gens {
				g := w.enter(slot)
				if cur := gen.Load(); cur != seen {
					seen = cur
					g.leave()
					continue
				}
				select {
				case <-g.ch:
					g.leave()
				case <-time.After(20 * time.Second):
					g.leave()
					t.Errorf("a stream of slot %d still at generation %d of %d", slot, seen, gens)
					return
				}
			}
		})
	}
	for i := uint64(1); i <= gens; i++ {
		gen.Store(i)
		w.wake(i, false)
		if i%5 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
}

// With a gap, a wave wakes a slice no sooner than gap after its last wake;
// an urgent wake (an item state change) does not wait.
func TestWavesKeepTheGapUnlessUrgent(t *testing.T) {
	w := &waves{gap: time.Hour}
	slot := w.slot()
	g := w.enter(slot)
	w.wake(1, false)
	<-g.ch // the first wake of a slice is at once
	g.leave()
	g = w.enter(slot)
	w.wake(2, false)
	select {
	case <-g.ch:
		t.Fatal("a slice woken again within the gap")
	case <-time.After(50 * time.Millisecond):
	}
	w.wake(3, true)
	<-g.ch
	g.leave()
}
