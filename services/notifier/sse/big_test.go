package sse_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/topics"
)

// One promote tick admits 100,000 at once (a drop at a rate of 100,000/s):
// the admissions go out as several events in line order, and every SSE
// listener among them (300, spread over the line) is told it was admitted.
func TestHundredThousandAdmittedInOneTick(t *testing.T) {
	const n, listeners = 100_000, 300
	w := newWorld(t)
	w.setItem("mega", -1, true, topics.AdmissionPolicy{RatePerSecond: n, SessionTTLSeconds: 600})
	regs := w.register("mega", n)
	rep := w.notifier(15*time.Second, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	type seen struct {
		first, last event
		err         error
	}
	who := make([]int, listeners)
	runs := make([]seen, listeners)
	connected := make(chan struct{}, listeners)
	var wg sync.WaitGroup
	for j := range who {
		who[j] = j * (n / listeners) // 0, 333, ... 99,667
		r := regs[who[j]]
		wg.Go(func() {
			c, err := w.open(ctx, rep.eventsURL("mega", r.Token), nil)
			if err != nil {
				runs[j].err = err
				connected <- struct{}{}
				return
			}
			defer c.close()
			runs[j].first, runs[j].err = c.next()
			connected <- struct{}{}
			if runs[j].err != nil {
				return
			}
			rest, err := c.all()
			runs[j].err = err
			if len(rest) > 0 {
				runs[j].last = rest[len(rest)-1]
			}
		})
	}
	for range listeners {
		<-connected
	}
	w.scheduler(100 * time.Millisecond)
	order, at := w.admissionOrder(ctx, "mega", n)
	wg.Wait()

	tick := at[regs[0].TokenID]
	for i, r := range regs {
		require.Equal(t, i, order[r.TokenID], "admission order")
		require.Equal(t, tick, at[r.TokenID], "all admitted by one tick")
	}
	for j, i := range who {
		require.NoError(t, runs[j].err, "listener at %d", i)
		require.Equal(t, sse.EventPosition, runs[j].first.Type, "listener at %d", i)
		require.Equal(t, int64(i+1), runs[j].first.position(t).Position, "listener at %d", i)
		require.Equal(t, sse.EventAdmitted, runs[j].last.Type, "listener at %d is told it was admitted", i)
	}
}
