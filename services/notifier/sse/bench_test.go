package sse_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// childEnv makes the test binary run a notifier process instead of the tests
// (BenchmarkStreams measures the notifier alone, apart from its clients).
const childEnv = "WR_NOTIFIER_BENCH_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := runChild(); err != nil {
			fmt.Fprintln(os.Stderr, "notifier child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// memReport is what the child's /debug/mem answers, after a GC.
type memReport struct {
	HeapInuse, StackInuse, RSS uint64
	CPU                        float64 // user + system seconds so far
	Goroutines                 int
}

// runChild serves a notifier configured from the environment, with a
// /debug/mem route on the same engine, until SIGTERM.
func runChild() error {
	cfg, err := config.Load[sse.Config]()
	if err != nil {
		return err
	}
	cfg.DevKeys = true // the world signs with the development keys, which a deployed notifier refuses
	raiseNoFile()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := zap.NewNop()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	n, err := sse.New(context.Background(), cfg, log, reg)
	if err != nil {
		return err
	}
	ready := &httpserver.Readiness{}
	engine := httpserver.New(log, reg, ready)
	n.Routes(engine)
	engine.GET("/debug/mem", func(c *gin.Context) {
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		cpu := float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
		c.JSON(http.StatusOK, memReport{HeapInuse: ms.HeapInuse, StackInuse: ms.StackInuse, RSS: rss(), CPU: cpu, Goroutines: runtime.NumGoroutine()})
	})
	// Profiles of the notifier alone, fetched by BenchmarkStreams when
	// WR_BENCH_PROFILE names a directory.
	engine.GET("/debug/pprof/profile", gin.WrapF(pprof.Profile))
	engine.GET("/debug/pprof/trace", gin.WrapF(pprof.Trace))
	engine.GET("/debug/pprof/heap", gin.WrapH(pprof.Handler("heap")))
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return n.Run(gctx, ready) })
	// Served as sse.Run serves it: behind the notifier's Front, where the
	// HTTP/2 streams wait (WR_BENCH_FRONT=0: the engine alone, the streams
	// waiting below gin's frames, for comparison).
	h := n.Front(engine)
	if os.Getenv("WR_BENCH_FRONT") == "0" {
		h = engine
	}
	g.Go(func() error { return httpserver.Serve(gctx, ln, h, cfg.Listener(), log) })
	return g.Wait()
}

func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// raiseNoFile lifts the open-files limit to its hard maximum.
func raiseNoFile() uint64 {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	return l.Cur
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDur(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkStreams opens WR_BENCH_STREAMS (default 2,000) SSE streams on one
// notifier process (this test binary re-run as the notifier, so its figures
// are its own), then reports:
//   - bytes/stream: heap + stacks in use after a GC, over the streams, less
//     the idle notifier's (rss-bytes/stream: the same from the RSS;
//     stack-bytes/stream: the stacks alone, after the idle's two more GCs);
//   - idle-cpu-%: the notifier's CPU over WR_BENCH_IDLE (default 16 s, so one
//     15 s heartbeat round is in it) with every stream open and no events;
//   - admitted-p50-ms, admitted-p99-ms: from an admission event's time (the
//     scheduler's tick) to the client reading its admitted event, and
//     position-p99-ms the same for position events (paced to one a second per
//     stream), while the real scheduler admits WR_BENCH_RATE per second
//     (default 100; tick 200 ms) for WR_BENCH_SECONDS (default 5): every tick
//     moves every stream;
//   - cpu-us/event: the notifier's CPU while admitting, less its idle
//     rate, over the position and admitted events its clients read;
//   - with WR_BENCH_H2C=C, the streams go over C cleartext HTTP/2
//     connections (h2c, as from a front door), C clients of one connection
//     each, the notifier's WR_HTTP_H2C_MAX_STREAMS set to streams/C rounded
//     up, instead of a hijacked HTTP/1.1 connection each (WR_BENCH_FRONT=0:
//     the notifier's engine served without its Front, so the streams wait
//     on gin's handler; WR_SSE_H2C_SERVER=own, read by the notifier
//     child: served by pkg/web/h2c instead of net/http's HTTP/2);
//   - with WR_BENCH_RECONNECT=1, reconnect-redis-cmds/stream: every stream
//     closed and opened again with its last event id (its cursor), timed,
//     with the Redis commands that cost (=plain: the progress alone, without
//     the cursor, for comparison).
//
// The clients dial from the loopback addresses in WR_BENCH_CLIENT_ADDRS
// (default 127.0.0.2-127.0.0.9), past one address's ephemeral ports. Each
// stream holds a file descriptor in the notifier and one here: the hard
// RLIMIT_NOFILE (raised to it in both processes) bounds WR_BENCH_STREAMS,
// unless WR_BENCH_H2C multiplexes them.
//
// b.N is ignored; run it once:
//
//	go test -run '^$' -bench BenchmarkStreams -benchtime 1x ./sse/
func BenchmarkStreams(b *testing.B) {
	streams := envInt("WR_BENCH_STREAMS", 2000)
	rate := envInt("WR_BENCH_RATE", 100)
	admitFor := envDur("WR_BENCH_SECONDS", 5*time.Second)
	idle := envDur("WR_BENCH_IDLE", 16*time.Second)
	h2c := envInt("WR_BENCH_H2C", 0)
	if conns := cmp.Or(h2c, streams); uint64(conns)+200 > raiseNoFile() {
		b.Fatalf("%d connections need %d open files in the notifier (and as many in this process, its clients); the limit is %d and this process cannot raise its hard limit (ulimit -Hn)", conns, conns+200, raiseNoFile())
	}
	w := newWorld(b)
	w.http.Transport.(*http.Transport).MaxIdleConnsPerHost = 10
	// The streams' connections come from several loopback addresses: one
	// address runs out of ephemeral ports near 28,000 connections to the
	// notifier's one address and port.
	srcs := spreadSources(w.http.Transport.(*http.Transport), os.Getenv("WR_BENCH_CLIENT_ADDRS"))
	b.Logf("clients dial from %d loopback addresses; open-file limit %d", srcs, raiseNoFile())
	clients, perConn, dialled := streamClients(b, w, streams, h2c)
	// Paused while the streams open; more registered than streams, so the
	// line does not run dry during the admission window.
	w.setItem("bench", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 600})
	regs := w.register("bench", streams)

	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b))
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=1",
		"WR_NOTIFIER_ADDR="+addr, "WR_KAFKA_BROKERS="+strings.Join(w.brokers, ","), "WR_REDIS_ADDR="+w.redis.Addr,
		"WR_LOG_LEVEL=warn", "WR_SSE_HEARTBEAT=15s", "WR_HTTP_H2C_MAX_STREAMS="+strconv.Itoa(perConn),
		// The world's keys (the dev keys), given as a deployed notifier gets them.
		"WR_TOKEN_KEY="+registration.DevTokenKey, "WR_ADMISSION_KEY="+registration.DevAdmissionKey)
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	require.NoError(b, child.Start())
	defer func() {
		_ = child.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = child.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = child.Process.Kill()
			<-done
		}
	}()
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := w.http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		require.True(b, time.Now().Before(deadline), "notifier child not ready")
		time.Sleep(50 * time.Millisecond)
	}
	mem := func() memReport {
		resp, err := w.http.Get(base + "/debug/mem")
		require.NoError(b, err)
		defer resp.Body.Close()
		var m memReport
		require.NoError(b, json.NewDecoder(resp.Body).Decode(&m))
		return m
	}
	before := mem()
	if h2c > 0 {
		warmUp(b, clients, base+"/healthz")
	}

	// Open the streams, a few hundred dials at a time.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type seen struct {
		at  time.Time
		pos int64 // 0: admitted
	}
	got := make([][]seen, streams)
	lastID := make([]string, streams) // each stream's last event id, for the reconnect
	opened := make(chan error, streams)
	dials := make(chan struct{}, 256)
	var wg sync.WaitGroup
	openStart := time.Now()
	for i, r := range regs {
		wg.Go(func() {
			dials <- struct{}{}
			c, err := openWith(ctx, clients[i%len(clients)], base+"/api/v1/items/bench/registrations/"+r.Token+"/events", nil)
			if err == nil {
				defer c.close()
				var ev event
				if ev, err = c.next(); err == nil && ev.Type != sse.EventPosition {
					err = fmt.Errorf("first event %s", ev.Type)
				}
				lastID[i] = ev.ID
			}
			<-dials
			opened <- err
			if err != nil {
				return
			}
			for {
				ev, err := c.next()
				if err != nil {
					return
				}
				lastID[i] = ev.ID
				switch ev.Type {
				case sse.EventPosition:
					got[i] = append(got[i], seen{at: ev.At, pos: positionOf(ev.Data)})
				case sse.EventAdmitted:
					got[i] = append(got[i], seen{at: ev.At})
				}
			}
		})
	}
	for range streams {
		require.NoError(b, <-opened)
	}
	b.Logf("%d streams open in %s over %d connections", streams, time.Since(openStart).Round(time.Millisecond), cmp.Or(int(dialled.Load()), streams))
	time.Sleep(time.Second)
	open := mem()
	if dir := os.Getenv("WR_BENCH_PROFILE"); dir != "" {
		fetch(b, base+"/debug/pprof/heap", dir+"/notifier.heap")
	}
	perStream := (float64(open.HeapInuse+open.StackInuse) - float64(before.HeapInuse+before.StackInuse)) / float64(streams)
	rssPerStream := (float64(open.RSS) - float64(before.RSS)) / float64(streams)
	b.Logf("notifier: heap %d -> %d MiB, stacks %d -> %d MiB, RSS %d -> %d MiB, goroutines %d -> %d",
		before.HeapInuse>>20, open.HeapInuse>>20, before.StackInuse>>20, open.StackInuse>>20, before.RSS>>20, open.RSS>>20, before.Goroutines, open.Goroutines)

	// Idle: streams open, nothing happening but heartbeats.
	idleStart := mem()
	time.Sleep(idle)
	idleEnd := mem()
	idleCPU := (idleEnd.CPU - idleStart.CPU) / idle.Seconds() * 100
	// Stacks per stream after the first GC with the streams open, and after
	// two more (the idle's): a parked goroutine's stack is halved at most
	// once a GC, so a stack the open grew settles over a few.
	stackAt := func(m memReport) float64 {
		return (float64(m.StackInuse) - float64(before.StackInuse)) / float64(streams)
	}
	b.Logf("notifier stacks per stream: %.0f B after one GC, %.0f B after three; heap+stacks after three %.0f B",
		stackAt(open), stackAt(idleEnd), (float64(idleEnd.HeapInuse+idleEnd.StackInuse)-float64(before.HeapInuse+before.StackInuse))/float64(streams))

	// Admission: the real scheduler at rate per second; every tick moves every stream.
	w.setItem("bench", -1, true, topics.AdmissionPolicy{RatePerSecond: float64(rate), SessionTTLSeconds: 600})
	cpuBefore, selfBefore := mem().CPU, selfCPU()
	admitStart := time.Now()
	sctx, stopSched := context.WithCancel(context.Background())
	schedDone := make(chan struct{})
	go func() {
		defer close(schedDone)
		w.schedulerRun(sctx, 200*time.Millisecond)
	}()
	var profs sync.WaitGroup
	if dir := os.Getenv("WR_BENCH_PROFILE"); dir != "" {
		secs := strconv.Itoa(max(1, int(admitFor.Seconds())))
		for _, p := range []string{"profile", "trace"} {
			profs.Go(func() { fetch(b, base+"/debug/pprof/"+p+"?seconds="+secs, dir+"/notifier."+p) })
		}
	}
	time.Sleep(admitFor)
	profs.Wait()
	stopSched()
	<-schedDone
	time.Sleep(time.Second) // the last tick's updates reach the clients
	clientCPU := (selfCPU() - selfBefore) / time.Since(admitStart).Seconds() * 100
	admitSecs := time.Since(admitStart).Seconds()
	cpuAdmitSecs := mem().CPU - cpuBefore
	cpuAdmit := cpuAdmitSecs / admitSecs * 100
	metrics := readMetrics(b, w, base)
	srvP50, srvP99 := histogramQuantiles(metrics, "waitroom_notifier_delivery_latency_seconds", `type="admitted"`)
	posP50, posP99 := histogramQuantiles(metrics, "waitroom_notifier_delivery_latency_seconds", `type="position"`)
	lagP50, lagP99 := histogramQuantiles(metrics, "waitroom_notifier_admission_lag_seconds", "")
	cancel()
	wg.Wait()
	if how := os.Getenv("WR_BENCH_RECONNECT"); how == "1" || how == "plain" {
		if how == "plain" { // the progress alone, as before cursors: every open reads Redis
			for i, id := range lastID {
				lastID[i], _, _ = strings.Cut(id, ".")
			}
		}
		reconnect(b, base, clients, w, regs, lastID)
	}

	// Heads and times of every admission event, and the event that admitted each token.
	headAt, tokenAt := w.readAdmissions("bench")
	var adm, pos []time.Duration
	for i, r := range regs {
		seq := int64(i + 1)
		for _, s := range got[i] {
			if s.pos == 0 {
				if at, ok := tokenAt[r.TokenID]; ok {
					adm = append(adm, s.at.Sub(at))
				}
			} else if at, ok := headAt[seq-s.pos]; ok {
				pos = append(pos, s.at.Sub(at))
			}
		}
	}
	require.NotEmpty(b, adm, "nobody was admitted")
	require.NotEmpty(b, w.produced, "no admission event was produced")
	require.NotEmpty(b, pos, "no position was delivered")
	q := func(lat []time.Duration, p float64) float64 {
		slices.Sort(lat)
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.Logf("admission: %d events, %d admitted told, %d position updates; CPU while admitting: notifier %.0f%%, this process (clients, kfake, scheduler) %.0f%% of one core",
		len(headAt), len(adm), len(pos), cpuAdmit, clientCPU)
	b.Logf("the harness's share: event time -> produce acknowledged (scheduler and kfake, in this process): p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		q(w.produced, .5), q(w.produced, .99), q(w.produced, 1))
	b.Logf("admitted: p50 %.1f ms, p99 %.1f ms, max %.1f ms; positions (paced to 1/s per stream): p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		q(adm, .5), q(adm, .99), q(adm, 1), q(pos, .5), q(pos, .99), q(pos, 1))
	b.ReportMetric(float64(streams), "streams")
	if h2c > 0 {
		b.ReportMetric(float64(dialled.Load()), "h2c-conns")
	}
	b.ReportMetric(perStream, "bytes/stream")
	b.ReportMetric(rssPerStream, "rss-bytes/stream")
	b.ReportMetric(stackAt(idleEnd), "stack-bytes/stream")
	b.ReportMetric(idleCPU, "idle-cpu-%")
	b.ReportMetric(q(adm, .5), "admitted-p50-ms")
	b.ReportMetric(q(adm, .99), "admitted-p99-ms")
	b.ReportMetric(q(pos, .99), "position-p99-ms")
	// The notifier's CPU over the admission window, less its idle rate (the
	// heartbeats), over the events its clients read: what docs/capacity.md
	// calls a stream event's cost.
	idleSecs := (idleEnd.CPU - idleStart.CPU) / idle.Seconds() * admitSecs
	b.ReportMetric((cpuAdmitSecs-idleSecs)*1e6/float64(len(pos)+len(adm)), "cpu-us/event")
	b.Logf("notifier's own histograms (bucket bounds): event time -> read by the notifier p50 <= %s, p99 <= %s; -> admitted written p50 <= %s, p99 <= %s; -> position written p50 <= %s, p99 <= %s",
		lagP50, lagP99, srvP50, srvP99, posP50, posP99)
}

// reconnect waits until the notifier saw every stream close, then opens
// them all again with the last event id each had (as EventSource does) and
// reports how long that took and the Redis commands it cost: a stream that
// had a cursor opens without a Redis read and without the open rate's turn.
func reconnect(b *testing.B, base string, clients []*http.Client, w *world, regs []reg, lastID []string) {
	deadline := time.Now().Add(40 * time.Second) // the heartbeat finds the closed ones
	for w.metricAt(base, "waitroom_notifier_open_streams") > 0 {
		require.True(b, time.Now().Before(deadline), "the notifier still holds closed streams")
		time.Sleep(200 * time.Millisecond)
	}
	cursors0, calls0, start := w.metricAt(base, "waitroom_notifier_cursor_opens_total"), w.redisCalls(), time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dials := make(chan struct{}, 256)
	errs := make(chan error, len(regs))
	for i, r := range regs {
		go func() {
			dials <- struct{}{}
			defer func() { <-dials }()
			c, err := openWith(ctx, clients[i%len(clients)], base+"/api/v1/items/bench/registrations/"+r.Token+"/events", map[string]string{"Last-Event-ID": lastID[i]})
			if err == nil {
				_, err = c.next()
				c.close()
			}
			errs <- err
		}()
	}
	for range regs {
		require.NoError(b, <-errs)
	}
	took, calls := time.Since(start), w.redisCalls()-calls0
	cursors := w.metricAt(base, "waitroom_notifier_cursor_opens_total") - cursors0
	b.Logf("reconnect: %d streams open again in %s (%.0f/s), %.0f of them from their cursor; Redis commands meanwhile %d (%.2f per stream, the notifier's background included)",
		len(regs), took.Round(time.Millisecond), float64(len(regs))/took.Seconds(), cursors, calls, float64(calls)/float64(len(regs)))
	b.ReportMetric(float64(calls)/float64(len(regs)), "reconnect-redis-cmds/stream")
}

// streamClients are the clients the streams open with, stream i with
// clients[i%len(clients)]: the world's HTTP/1.1 client (h2c 0), or h2c
// clients of one connection each carrying perConn streams (what the
// notifier is told to allow; 250, the default, for HTTP/1.1), and a count
// of their dials.
func streamClients(b *testing.B, w *world, streams, h2c int) (clients []*http.Client, perConn int, dialled *atomic.Int64) {
	dialled = new(atomic.Int64)
	if h2c == 0 {
		return []*http.Client{w.http}, 250, dialled
	}
	perConn = (streams + h2c - 1) / h2c
	for range h2c {
		tr := h2cTransport(nil)
		spreadSources(tr, os.Getenv("WR_BENCH_CLIENT_ADDRS"))
		dial := tr.DialContext
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dialled.Add(1)
			return dial(ctx, network, addr)
		}
		b.Cleanup(tr.CloseIdleConnections)
		clients = append(clients, &http.Client{Transport: tr})
	}
	b.Logf("h2c: %d streams over %d connections, %d streams a connection at most", streams, h2c, perConn)
	return clients, perConn, dialled
}

// warmUp makes each client open its connection, one after another, so the
// streams then opened at once share it instead of racing to dial their own.
func warmUp(b *testing.B, clients []*http.Client, url string) {
	for _, c := range clients {
		resp, err := c.Get(url)
		require.NoError(b, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// metricAt reads one un-labelled sample from the notifier's /metrics at base.
func (w *world) metricAt(base, name string) float64 {
	return w.metric(&notifier{URL: base}, name)
}

// spreadSources makes tr dial from the loopback addresses in list (comma
// separated; default 127.0.0.2-127.0.0.9) in turn, those that can be bound;
// it returns how many.
func spreadSources(tr *http.Transport, list string) int {
	if list == "" {
		list = "127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5,127.0.0.6,127.0.0.7,127.0.0.8,127.0.0.9"
	}
	var ips []net.IP
	for _, a := range strings.Split(list, ",") {
		ip := net.ParseIP(strings.TrimSpace(a))
		if ip == nil {
			continue
		}
		if ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0")); err == nil {
			ln.Close()
			ips = append(ips, ip)
		}
	}
	if len(ips) == 0 {
		return 1
	}
	var next atomic.Uint64
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		ip := ips[next.Add(1)%uint64(len(ips))]
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: ip}}
		return d.DialContext(ctx, network, addr)
	}
	return len(ips)
}

// fetch saves what url answers to path (a profile of the notifier child).
func fetch(b *testing.B, url, path string) {
	resp, err := http.Get(url)
	if err != nil {
		b.Logf("%s: %v", url, err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		b.Logf("%s: %v", path, err)
		return
	}
	defer f.Close()
	_, _ = io.Copy(f, resp.Body)
}

// positionOf reads "position" from a position event's data without a JSON
// decoder (the clients share the notifier's two cores).
func positionOf(data string) int64 {
	const key = `"position":`
	i := strings.Index(data, key)
	if i < 0 {
		return -1
	}
	var n int64
	for _, c := range data[i+len(key):] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// schedulerRun runs one scheduler replica until ctx ends.
func (w *world) schedulerRun(ctx context.Context, tick time.Duration) {
	w.runLeader(ctx, tick)
}

// readAdmissions reads item's admission events from the start: each head's
// event time and each token's first event time.
func (w *world) readAdmissions(item string) (map[int64]time.Time, map[string]time.Time) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.ConsumeTopics(topics.Admissions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(w.t, err)
	defer cl.Close()
	heads, tokens := map[int64]time.Time{}, map[string]time.Time{}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		if fs.NumRecords() == 0 {
			return heads, tokens
		}
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := topics.DecodeAdmission(r.Value)
			if err != nil || ev.ItemID != item {
				return
			}
			at := time.UnixMilli(ev.At)
			if _, ok := heads[ev.Head]; !ok {
				heads[ev.Head] = at
			}
			for _, id := range ev.Admitted {
				if _, ok := tokens[id]; !ok {
					tokens[id] = at
				}
			}
		})
	}
}

// readMetrics reads the notifier's /metrics.
func readMetrics(b *testing.B, w *world, base string) string {
	resp, err := w.http.Get(base + "/metrics")
	require.NoError(b, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(b, err)
	return string(raw)
}

// histogramQuantiles returns the upper bounds of the buckets holding the
// median and the 99th percentile of histogram name (of the series whose
// labels hold label) in the text exposition metrics.
func histogramQuantiles(metrics, name, label string) (p50, p99 string) {
	type bucket struct {
		le    string
		count float64
	}
	var bs []bucket
	prefix := name + `_bucket{`
	for _, l := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(l, prefix) || !strings.Contains(l, label) {
			continue
		}
		_, rest, ok := strings.Cut(l, `le="`)
		i := strings.Index(rest, `"}`)
		if !ok || i < 0 {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(rest[i+2:]), 64)
		if err != nil {
			continue
		}
		bs = append(bs, bucket{le: rest[:i], count: n})
	}
	if len(bs) == 0 {
		return "?", "?"
	}
	total := bs[len(bs)-1].count
	find := func(q float64) string {
		for _, bk := range bs {
			if bk.count >= q*total {
				return bk.le + "s"
			}
		}
		return "+Inf"
	}
	return find(0.5), find(0.99)
}
