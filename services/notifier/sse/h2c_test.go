package sse_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/docs"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/topics"
)

// h2cServers are the servers of h2c the tests run against (WR_SSE_H2C_SERVER).
var h2cServers = []string{config.H2CNet, config.H2COwn}

// eachH2C runs test against each of h2cServers.
func eachH2C(t *testing.T, test func(t *testing.T, server string)) {
	for _, server := range h2cServers {
		t.Run(server, func(t *testing.T) { test(t, server) })
	}
}

// h2cNotifier starts a notifier that also speaks cleartext HTTP/2 with
// server's h2c, at most perConn streams a connection, its config changed
// by set (nil: none).
func (w *world) h2cNotifier(server string, hb time.Duration, perConn int, set func(*sse.Config)) *notifier {
	w.t.Helper()
	return w.notifierWith(hb, 0, func(c *sse.Config) {
		c.H2CServer = server
		c.HTTP.H2CMaxStreams = perConn
		if set != nil {
			set(c)
		}
	})
}

// requireAdmitted reads c to its end and requires its last event to be the
// admission of tokenID, with an admission token that verifies.
func (w *world) requireAdmitted(c *sseConn, tokenID string) {
	w.t.Helper()
	evs, err := c.all()
	require.NoError(w.t, err)
	require.NotEmpty(w.t, evs)
	last := evs[len(evs)-1]
	require.Equal(w.t, sse.EventAdmitted, last.Type)
	var a sse.Admitted
	require.NoError(w.t, json.Unmarshal([]byte(last.Data), &a))
	adm, err := w.admit.ParseAdmission(a.AdmissionToken)
	require.NoError(w.t, err)
	assert.Equal(w.t, tokenID, adm.TokenID)
}

// countDials makes tr count the connections it dials.
func countDials(tr *http.Transport) *atomic.Int32 {
	n := new(atomic.Int32)
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.Add(1)
		return dial(ctx, network, addr)
	}
	return n
}

// A stream over h2c (a front door's upstream connection) gets its position
// and its admission as one over HTTP/1.1 does, which the same listener still
// serves.
func TestH2CStreamGetsItsPositionAndAdmission(t *testing.T) {
	eachH2C(t, testH2CStreamGetsItsPositionAndAdmission)
}

func testH2CStreamGetsItsPositionAndAdmission(t *testing.T, server string) {
	w := newWorld(t)
	w.setItem("h2", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	regs := w.register("h2", 3)
	nt := w.h2cNotifier(server, time.Second, 10, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c, err := openWith(ctx, h2cClient(t, nil), nt.eventsURL("h2", regs[2].Token), nil)
	require.NoError(t, err)
	defer c.close()
	require.Equal(t, 2, c.Resp.ProtoMajor, "HTTP/2")
	assert.Equal(t, "text/event-stream", c.Resp.Header.Get("Content-Type"))
	assert.Equal(t, int64(3), firstPosition(t, c))
	assert.Equal(t, "3000", c.Retry)

	h1, err := w.open(ctx, nt.eventsURL("h2", regs[1].Token), nil)
	require.NoError(t, err)
	defer h1.close()
	require.Equal(t, 1, h1.Resp.ProtoMajor, "HTTP/1.1 beside it")
	assert.Equal(t, int64(2), firstPosition(t, h1))

	w.setItem("h2", -1, true, topics.AdmissionPolicy{RatePerSecond: 100, SessionTTLSeconds: 60})
	w.scheduler(50 * time.Millisecond)
	w.requireAdmitted(c, regs[2].TokenID)
	require.Eventually(t, func() bool { return w.metric(nt, "waitroom_notifier_open_streams") == 0 }, 5*time.Second, 10*time.Millisecond,
		"both admitted streams ended")
}

// A stream over HTTP/2 waits in the notifier's Front once gin returned (its
// goroutine's stack can then shrink to 4 KiB; BENCHMARKS): its request is
// counted answered while it streams, as a hijacked stream's is, a client
// that leaves frees it at once rather than at a heartbeat, and a stream
// there still gets its admission.
func TestH2CStreamWaitsOutsideGin(t *testing.T) { eachH2C(t, testH2CStreamWaitsOutsideGin) }

func testH2CStreamWaitsOutsideGin(t *testing.T, server string) {
	w := newWorld(t)
	w.setItem("h2front", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	regs := w.register("h2front", 2)
	nt := w.h2cNotifier(server, time.Minute, 10, nil) // no heartbeat within the test
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := h2cClient(t, nil)
	answered := `waitroom_http_requests_total{code="200",method="GET",route="` + sse.EventsPath + `"}`

	left, err := openWith(ctx, client, nt.eventsURL("h2front", regs[0].Token), nil)
	require.NoError(t, err)
	require.Equal(t, 2, left.Resp.ProtoMajor)
	assert.Equal(t, int64(1), firstPosition(t, left))
	assert.Equal(t, 1.0, w.metric(nt, "waitroom_notifier_open_streams"))
	assert.Equal(t, 1.0, w.metric(nt, answered), "the open stream's request is not answered: it waits under gin")
	left.close()
	require.Eventually(t, func() bool { return w.metric(nt, "waitroom_notifier_open_streams") == 0 }, 3*time.Second, 10*time.Millisecond,
		"the stream whose client left is still open")

	c, err := openWith(ctx, client, nt.eventsURL("h2front", regs[1].Token), nil)
	require.NoError(t, err)
	defer c.close()
	assert.Equal(t, int64(2), firstPosition(t, c))
	assert.Equal(t, 2.0, w.metric(nt, answered))
	w.setItem("h2front", -1, true, topics.AdmissionPolicy{RatePerSecond: 100, SessionTTLSeconds: 60})
	w.scheduler(50 * time.Millisecond)
	w.requireAdmitted(c, regs[1].TokenID)
	require.Eventually(t, func() bool { return w.metric(nt, "waitroom_notifier_open_streams") == 0 }, 5*time.Second, 10*time.Millisecond)
}

// A stream over HTTP/2 whose writes are minutes apart is not cut by the
// write timeout that bounds each write (net/http's HTTP/2 write deadline,
// left armed after a write, would reset it once passed).
func TestH2CIdleStreamOutlivesTheWriteTimeout(t *testing.T) {
	eachH2C(t, testH2CIdleStreamOutlivesTheWriteTimeout)
}

func testH2CIdleStreamOutlivesTheWriteTimeout(t *testing.T, server string) {
	w := newWorld(t)
	w.setItem("h2idle", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	me := w.register("h2idle", 1)[0]
	nt := w.h2cNotifier(server, 250*time.Millisecond, 10, func(c *sse.Config) { c.WriteTimeout = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()

	c, err := openWith(ctx, h2cClient(t, nil), nt.eventsURL("h2idle", me.Token), nil)
	require.NoError(t, err)
	defer c.close()
	require.Equal(t, 2, c.Resp.ProtoMajor)
	assert.Equal(t, int64(1), firstPosition(t, c))
	_, err = c.next() // nothing but heartbeats until the request's deadline
	require.ErrorIs(t, err, context.DeadlineExceeded, "the stream ended before the client left")
	assert.GreaterOrEqual(t, c.Pings, 3, "heartbeats 250 ms apart, each past the last write's timeout")
	assert.Zero(t, w.metric(nt, "waitroom_notifier_write_errors_total"))
}

// One client that stops reading its stream, on the same HTTP/2 connection as
// 100 others, holds none of them: once its stream's flow-control window is
// full the notifier's write to it waits, the others' admissions arrive
// meanwhile, and the stuck stream is reset at its write timeout, its slot
// given back.
func TestH2CSlowReaderDoesNotHoldOthers(t *testing.T) { eachH2C(t, testH2CSlowReaderDoesNotHoldOthers) }

func testH2CSlowReaderDoesNotHoldOthers(t *testing.T, server string) {
	const n = 100
	w := newWorld(t)
	w.setItem("h2slow", -1, true, topics.AdmissionPolicy{RatePerSecond: 400, SessionTTLSeconds: 60})
	regs := w.register("h2slow", n+1)
	stuck, others := regs[0], regs[1:]
	nt := w.h2cNotifier(server, 20*time.Millisecond, 2*n, func(c *sse.Config) { c.WriteTimeout = 3 * time.Second })
	// 512 bytes a stream unread: the stuck stream's retry, position and ~45
	// heartbeats of 8 bytes.
	tr := h2cTransport(&http.HTTP2Config{MaxReceiveBufferPerStream: 512})
	dials := countDials(tr)
	t.Cleanup(tr.CloseIdleConnections)
	cl := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sc, err := openWith(ctx, cl, nt.eventsURL("h2slow", stuck.Token), nil) // headers read, body never
	require.NoError(t, err)
	defer sc.close()
	require.Equal(t, 2, sc.Resp.ProtoMajor)
	stuckAt := time.Now()

	runs := make([]clientRun, n)
	connected := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i, r := range others {
		wg.Go(func() {
			c, err := openWith(ctx, cl, nt.eventsURL("h2slow", r.Token), nil)
			if err == nil {
				defer c.close()
				var first event
				if first, err = c.next(); err == nil {
					connected <- struct{}{}
					var rest []event
					rest, err = c.all()
					runs[i].events = append([]event{first}, rest...)
				}
			}
			if err != nil {
				connected <- struct{}{}
				runs[i].err = err
			}
		})
	}
	for range n {
		<-connected
	}
	time.Sleep(time.Until(stuckAt.Add(1500 * time.Millisecond))) // its window is full by now
	require.Equal(t, float64(n+1), w.metric(nt, "waitroom_notifier_open_streams"))
	require.Zero(t, w.metric(nt, "waitroom_notifier_write_errors_total"), "the stuck stream's write waits, within its timeout")
	assert.Equal(t, int32(1), dials.Load(), "one connection carries every stream")

	w.scheduler(50 * time.Millisecond)
	_, eventAt := w.admissionOrder(ctx, "h2slow", n+1)
	wg.Wait()
	var lat []time.Duration
	for i, r := range others {
		require.NoError(t, runs[i].err)
		last := runs[i].events[len(runs[i].events)-1]
		require.Equal(t, sse.EventAdmitted, last.Type)
		lat = append(lat, last.At.Sub(eventAt[r.TokenID]))
	}
	slices.Sort(lat)
	t.Logf("admission event -> admitted at the client: p50 %s, p99 %s, max %s", lat[n/2], lat[n*99/100], lat[n-1])
	assert.Less(t, lat[n*99/100], time.Second, "p99 from the scheduler's tick to the client")
	require.Eventually(t, func() bool { return w.metric(nt, "waitroom_notifier_open_streams") == 0 }, 10*time.Second, 20*time.Millisecond,
		"the stuck stream ends at its write timeout")
	assert.Equal(t, float64(1), w.metric(nt, "waitroom_notifier_write_errors_total"), "the stuck stream's write timed out")
}

// The bounds hold over h2c: a connection carries at most
// WR_HTTP_H2C_MAX_STREAMS streams (the client opens another connection for
// more), and a token's streams are capped whatever connections they share.
func TestH2CBounds(t *testing.T) { eachH2C(t, testH2CBounds) }

func testH2CBounds(t *testing.T, server string) {
	w := newWorld(t)
	w.setItem("h2cap", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	regs := w.register("h2cap", 4)
	nt := w.h2cNotifier(server, time.Second, 2, func(c *sse.Config) { c.StreamsPerToken = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr := h2cTransport(nil)
	dials := countDials(tr)
	t.Cleanup(tr.CloseIdleConnections)
	cl := &http.Client{Transport: tr}
	open := func(r reg) *sseConn {
		t.Helper()
		c, err := openWith(ctx, cl, nt.eventsURL("h2cap", r.Token), nil)
		require.NoError(t, err)
		require.Equal(t, 2, c.Resp.ProtoMajor)
		return c
	}

	for i, r := range regs {
		c := open(r)
		defer c.close()
		assert.Equal(t, int64(i+1), firstPosition(t, c))
	}
	assert.Equal(t, int32(2), dials.Load(), "4 streams, 2 a connection")

	same := open(regs[0]) // regs[0]'s second stream: at the cap of 2
	defer same.close()
	assert.Equal(t, int64(1), firstPosition(t, same))
	refusedWith(t, open(regs[0]), http.StatusTooManyRequests, sse.CodeTooManyStreams)
	assert.Equal(t, float64(5), w.metric(nt, "waitroom_notifier_open_streams"))
	same.close()
	require.Eventually(t, func() bool { return w.metric(nt, "waitroom_notifier_open_streams") == 4 }, 5*time.Second, 10*time.Millisecond)
	again := open(regs[0])
	defer again.close()
	assert.Equal(t, int64(1), firstPosition(t, again), "the slot came back")
}

// The notifier's other routes work over the own h2c server as over
// HTTP/1.1 on the same listener, and a request with a body is refused as
// JSON (the notifier's routes are GETs).
func TestH2COwnServesTheOtherRoutes(t *testing.T) {
	w := newWorld(t)
	nt := w.h2cNotifier(config.H2COwn, time.Second, 10, nil)
	cl := h2cClient(t, nil)
	get := func(c *http.Client, path string) (*http.Response, string) {
		t.Helper()
		resp, err := c.Get(nt.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	resp, body := get(cl, "/readyz")
	assert.Equal(t, 2, resp.ProtoMajor)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, body, `"status":"ready"`)
	resp, body = get(cl, "/metrics")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, body, "waitroom_notifier_open_streams")
	resp, body = get(cl, "/nowhere")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Contains(t, body, `"code":"NOT_FOUND"`)
	resp, body = get(w.http, "/readyz")
	assert.Equal(t, 1, resp.ProtoMajor, "HTTP/1.1 on the same listener")
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	resp, err := cl.Post(nt.URL+"/readyz", "application/json", strings.NewReader(`{"x":1}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	var e httpserver.ErrorBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	assert.Equal(t, "BODY_NOT_ALLOWED", e.Error.Code)

	// The stream's route refuses a body the same way, as docs/openapi.yaml
	// says (the request, which sends one, is not the spec's to validate).
	c, err := docs.NewContract(context.Background(), nt.URL)
	require.NoError(t, err)
	path := "/api/v1/items/any/registrations/tok/events"
	req, err := http.NewRequest(http.MethodGet, nt.URL+path, strings.NewReader(`{"x":1}`))
	require.NoError(t, err)
	resp, err = cl.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	assert.Contains(t, string(b), `"code":"BODY_NOT_ALLOWED"`)
	require.NoError(t, c.Check(context.Background(), req, []byte(`{"x":1}`), true, resp.StatusCode, resp.Header, b))
}

// When the notifier stops, its h2c streams end (the client reads their
// end, no timeout) and it stops within its drain.
func TestH2CShutdownEndsTheStreams(t *testing.T) { eachH2C(t, testH2CShutdownEndsTheStreams) }

func testH2CShutdownEndsTheStreams(t *testing.T, server string) {
	w := newWorld(t)
	w.setItem("h2stop", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	regs := w.register("h2stop", 2)
	nt := w.h2cNotifier(server, time.Minute, 10, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl := h2cClient(t, nil)
	var conns []*sseConn
	for i, r := range regs {
		c, err := openWith(ctx, cl, nt.eventsURL("h2stop", r.Token), nil)
		require.NoError(t, err)
		defer c.close()
		require.Equal(t, 2, c.Resp.ProtoMajor)
		assert.Equal(t, int64(i+1), firstPosition(t, c))
		conns = append(conns, c)
	}
	stopped := time.Now()
	nt.stop()
	for _, c := range conns {
		_, err := c.all()
		require.NotErrorIs(t, err, context.DeadlineExceeded, "the stream outlived the notifier")
	}
	t.Logf("streams ended and the notifier stopped in %s", time.Since(stopped).Round(time.Millisecond))
}
