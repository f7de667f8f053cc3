package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/waitroom/waitroom/services/api/httpapi"
)

// TestStatusTailThroughRedisStalls (a measurement, run with
// WR_BENCH_STATUS_STALLS=1): status reads of 1,000 waiting tokens at 5,000 a
// second (WR_BENCH_STATUS_RATE) for 12 s, each timed from when it was due (open loop), while
// redis-server is held for 1 s (WR_BENCH_STATUS_HOLD; 0: never) every 3 s
// after the last hold ended (stallScript: a snapshot of a long line, a large
// admission tick); it logs p50, p90, p99 and the slowest.
func TestStatusTailThroughRedisStalls(t *testing.T) {
	if os.Getenv("WR_BENCH_STATUS_STALLS") == "" {
		t.Skip("a measurement: set WR_BENCH_STATUS_STALLS=1")
	}
	const dur, tokens = 12 * time.Second, 1000
	rate := 5000
	if r, err := strconv.Atoi(os.Getenv("WR_BENCH_STATUS_RATE")); err == nil && r > 0 {
		rate = r
	}
	e := newAPIWith(t, func(c *httpapi.Config) {
		c.Throttle.StatusRate, c.Throttle.StatusBurst = 100_000, 100_000
	}, item("tail"))
	toks := make([]string, tokens)
	for i := range toks {
		r, q := e.register("tail", fmt.Sprintf("user-%d", i))
		e.apply(q)
		toks[i] = r.Token
	}
	for _, tok := range toks {
		e.status("tail", tok) // each read once: its exact read is remembered
	}
	hold := time.Second
	if h, err := time.ParseDuration(os.Getenv("WR_BENCH_STATUS_HOLD")); err == nil {
		hold = h
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(3 * time.Second):
			}
			if hold > 0 {
				_ = stallScript.Run(ctx, e.rdb, nil, hold.Microseconds()).Err()
			}
		}
	}()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}, Timeout: 10 * time.Second}
	var (
		mu  sync.Mutex
		lat = make([]time.Duration, 0, rate*int(dur/time.Second))
		// served: from when each was sent (the sender's own lag left out)
		served = make([]time.Duration, 0, rate*int(dur/time.Second))
		errs   int
		why    string
		wg     sync.WaitGroup
	)
	start := time.Now()
	for i := 0; i < rate*int(dur/time.Second); i++ {
		due := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func(tok string) {
			defer wg.Done()
			sent := time.Now()
			resp, err := client.Get(e.url + "/api/v1/items/tail/registrations/" + tok)
			code := 0
			if err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			if code != http.StatusOK {
				errs++
				why = fmt.Sprint(code, err)
				return
			}
			lat = append(lat, time.Since(due))
			served = append(served, time.Since(sent))
		}(toks[i%tokens])
	}
	wg.Wait()
	slices.Sort(lat)
	slices.Sort(served)
	q := func(l []time.Duration, f float64) time.Duration { return l[int(f*float64(len(l)-1))] }
	t.Logf("status rate=%d for %s with redis-server held %s after each 3 s free: ok=%d errors=%d (%s) p50=%s p90=%s p99=%s max=%s; from sent: p90=%s p99=%s max=%s",
		rate, dur, hold, len(lat), errs, why, q(lat, 0.5), q(lat, 0.9), q(lat, 0.99), lat[len(lat)-1],
		q(served, 0.9), q(served, 0.99), served[len(served)-1])
}
