package sse_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/topics"
)

// refusedWith checks c is a refusal: status, Retry-After and the JSON
// error's code; it closes c.
func refusedWith(t *testing.T, c *sseConn, status int, code string) {
	t.Helper()
	defer c.close()
	require.Equal(t, status, c.Resp.StatusCode)
	assert.Equal(t, "3", c.Resp.Header.Get("Retry-After"), "the stream's retry, in seconds")
	var body httpserver.ErrorBody
	require.NoError(t, json.NewDecoder(c.Resp.Body).Decode(&body))
	assert.Equal(t, code, body.Error.Code)
	assert.NotEmpty(t, body.Error.Message)
}

// firstPosition reads a stream's first event, a position.
func firstPosition(t *testing.T, c *sseConn) int64 {
	t.Helper()
	require.Equal(t, http.StatusOK, c.Resp.StatusCode)
	ev, err := c.next()
	require.NoError(t, err)
	require.Equal(t, sse.EventPosition, ev.Type)
	return ev.position(t).Position
}

// One token opening 1,000 streams at once gets 3 (WR_SSE_STREAMS_PER_TOKEN)
// and 997 refusals 429 TOO_MANY_STREAMS with Retry-After; the 3 work, the
// notifier's goroutines and open streams stay at 3 streams' worth, and a
// slot comes back when its stream ends, by the client leaving or by the
// admission that ends it.
func TestOneTokenOpeningAThousandStreamsGetsThree(t *testing.T) {
	const tries, perToken = 1000, 3
	w := newWorld(t)
	w.setItem("cap", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60}) // paused: the streams stay open
	regs := w.register("cap", 2)
	me, other := regs[0], regs[1]
	nt := w.notifierWith(time.Second, 0, func(c *sse.Config) { c.StreamsPerToken = perToken })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := nt.eventsURL("cap", me.Token)
	open := func(url string) *sseConn {
		t.Helper()
		c, err := w.open(ctx, url, nil)
		require.NoError(t, err)
		return c
	}
	// The goroutines of the process (the notifier, Kafka clients, the test)
	// before any stream; one stream adds its own and the client's two.
	settled := func(limit int) func() bool {
		return func() bool { return runtime.NumGoroutine() <= limit }
	}
	base := runtime.NumGoroutine()

	// Fresh connections (no keep-alive), so a refused request leaves no
	// idle connection or goroutine behind on either side.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	peak := atomic.Int64{}
	sampled := make(chan struct{})
	sctx, stopSampling := context.WithCancel(ctx)
	go func() { // the open-stream gauge while the opens run
		defer close(sampled)
		for sctx.Err() == nil {
			peak.Store(max(peak.Load(), int64(w.metric(nt, "waitroom_notifier_open_streams"))))
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var (
		mu       sync.Mutex
		accepted []*sseConn
		refused  int
	)
	jobs := make(chan struct{}, tries)
	for range tries {
		jobs <- struct{}{}
	}
	close(jobs)
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			for range jobs {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if !assert.NoError(t, err) {
					return
				}
				resp, err := client.Do(req)
				if !assert.NoError(t, err) {
					return
				}
				switch resp.StatusCode {
				case http.StatusOK:
					mu.Lock()
					accepted = append(accepted, &sseConn{Resp: resp, r: bufio.NewReaderSize(resp.Body, 1024)})
					mu.Unlock()
				case http.StatusTooManyRequests:
					var body httpserver.ErrorBody
					assert.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
					assert.Equal(t, sse.CodeTooManyStreams, body.Error.Code)
					assert.Equal(t, "3", resp.Header.Get("Retry-After"))
					resp.Body.Close()
					mu.Lock()
					refused++
					mu.Unlock()
				default:
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					t.Errorf("status %d: %s", resp.StatusCode, b)
				}
			}
		})
	}
	wg.Wait()
	stopSampling()
	<-sampled
	require.Equal(t, perToken, len(accepted), "streams accepted")
	require.Equal(t, tries-perToken, refused)
	for _, c := range accepted {
		assert.Equal(t, int64(1), firstPosition(t, c), "every accepted stream works")
	}
	assert.LessOrEqual(t, peak.Load(), int64(perToken), "the open-stream gauge never passed the cap")
	assert.Equal(t, float64(perToken), w.metric(nt, "waitroom_notifier_open_streams"))
	assert.Equal(t, float64(tries-perToken), w.metric(nt, `waitroom_notifier_streams_refused_total{reason="token"}`))
	// 1,000 open streams would be thousands of goroutines; 3 are a dozen.
	require.Eventually(t, settled(base+50), 10*time.Second, 20*time.Millisecond,
		"goroutines: %d, %d before the streams", runtime.NumGoroutine(), base)

	// Another token is not held back by this one's cap.
	oc := open(nt.eventsURL("cap", other.Token))
	assert.Equal(t, int64(2), firstPosition(t, oc))
	oc.close()

	// A client that leaves gives its slot back: the token opens one again, and only one.
	accepted[0].close()
	require.Eventually(t, func() bool { return w.metric(nt, "waitroom_notifier_open_streams") == perToken-1 }, 5*time.Second, 10*time.Millisecond)
	accepted[0] = open(url)
	assert.Equal(t, int64(1), firstPosition(t, accepted[0]))
	refusedWith(t, open(url), http.StatusTooManyRequests, sse.CodeTooManyStreams)

	// The admission ends the three streams (their final state): every slot
	// comes back, and with it the goroutines.
	w.setItem("cap", -1, true, topics.AdmissionPolicy{RatePerSecond: 1000, SessionTTLSeconds: 60})
	w.scheduler(20 * time.Millisecond)
	for _, c := range accepted {
		evs, err := c.all()
		require.NoError(t, err)
		require.NotEmpty(t, evs)
		assert.Equal(t, sse.EventAdmitted, evs[len(evs)-1].Type)
		c.close()
	}
	require.Eventually(t, func() bool { return w.metric(nt, "waitroom_notifier_open_streams") == 0 }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, settled(base+20), 10*time.Second, 20*time.Millisecond,
		"goroutines: %d, %d before the streams", runtime.NumGoroutine(), base)
	again := open(url)
	require.Equal(t, http.StatusOK, again.Resp.StatusCode, "the token's slots are free again")
	evs, err := again.all()
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, sse.EventAdmitted, evs[0].Type)
	again.close()
	assert.Equal(t, float64(tries-perToken+1), w.metric(nt, `waitroom_notifier_streams_refused_total{reason="token"}`))
}

// Past WR_SSE_MAX_STREAMS a stream is refused 503 NOTIFIER_FULL with
// Retry-After, whichever its token; a stream that ends makes room.
func TestNotifierFullRefusesWith503(t *testing.T) {
	w := newWorld(t)
	w.setItem("full", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	regs := w.register("full", 3)
	nt := w.notifierWith(time.Second, 0, func(c *sse.Config) { c.MaxStreams = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(r reg) *sseConn {
		t.Helper()
		c, err := w.open(ctx, nt.eventsURL("full", r.Token), nil)
		require.NoError(t, err)
		return c
	}
	a, b := open(regs[0]), open(regs[1])
	defer a.close()
	assert.Equal(t, int64(1), firstPosition(t, a))
	assert.Equal(t, int64(2), firstPosition(t, b))
	refusedWith(t, open(regs[2]), http.StatusServiceUnavailable, sse.CodeNotifierFull)
	assert.Equal(t, float64(1), w.metric(nt, `waitroom_notifier_streams_refused_total{reason="notifier"}`))

	b.close()
	require.Eventually(t, func() bool { return w.metric(nt, "waitroom_notifier_open_streams") == 1 }, 5*time.Second, 10*time.Millisecond)
	c := open(regs[2])
	defer c.close()
	assert.Equal(t, int64(3), firstPosition(t, c))
}

// The per-address cap counts an IPv4 address, or an IPv6 /64, as the
// trusted front door names it in X-Forwarded-For.
func TestStreamsPerAddressCountIPv4AndIPv6Slash64(t *testing.T) {
	w := newWorld(t)
	w.setItem("addr", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	regs := w.register("addr", 8)
	nt := w.notifierWith(time.Second, 0, func(c *sse.Config) {
		c.StreamsPerAddress = 2
		c.TrustedProxies = []string{"127.0.0.0/8"} // the test is the front door
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := 0
	open := func(from string) *sseConn {
		t.Helper()
		c, err := w.open(ctx, nt.eventsURL("addr", regs[next].Token), map[string]string{"X-Forwarded-For": from})
		require.NoError(t, err)
		next++
		return c
	}
	for _, tc := range []struct{ first, second, third, elsewhere string }{
		{"198.51.100.7", "198.51.100.7", "198.51.100.7", "198.51.100.8"},
		{"2001:db8::1", "2001:db8::2:1", "2001:db8::ffff", "2001:db8:0:1::1"}, // one /64, then the next
	} {
		a, b := open(tc.first), open(tc.second)
		firstPosition(t, a)
		firstPosition(t, b)
		refusedWith(t, open(tc.third), http.StatusTooManyRequests, sse.CodeTooManyStreams)
		c := open(tc.elsewhere)
		firstPosition(t, c)
		a.close()
		b.close()
		c.close()
	}
	assert.Equal(t, float64(2), w.metric(nt, `waitroom_notifier_streams_refused_total{reason="address"}`))
}

// A stream on net/http's handler (HTTP/2, NoHijack) holds its slot too and
// gives it back when the client leaves.
func TestStreamOnTheHandlerGivesItsSlotBack(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := w.line.ApplyItem(ctx, topics.ItemState{ItemID: "nh", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60}})
	require.NoError(t, err)
	me := w.register("nh", 1)[0]
	_, nt := w.serve(ctx, sse.Options{NoHijack: true, StreamsPerToken: 1})
	open := func() *sseConn {
		t.Helper()
		c, err := w.open(ctx, nt.eventsURL("nh", me.Token), nil)
		require.NoError(t, err)
		return c
	}

	a := open()
	assert.Equal(t, int64(1), firstPosition(t, a))
	refusedWith(t, open(), http.StatusTooManyRequests, sse.CodeTooManyStreams)
	a.close()
	require.Eventually(t, func() bool { return w.metric(nt, "waitroom_notifier_open_streams") == 0 }, 5*time.Second, 10*time.Millisecond)
	b := open()
	defer b.close()
	assert.Equal(t, int64(1), firstPosition(t, b), "the slot came back")
}
