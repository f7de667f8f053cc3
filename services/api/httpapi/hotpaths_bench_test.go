package httpapi_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/services/api/httpapi"
)

// BenchmarkHotPaths drives the api's two hot paths, a status read answered
// from memory and a registration (produced to kfake and acknowledged), over
// one real HTTP/1.1 connection from a client that writes the request bytes
// itself and reads the answer with no allocation, as wrk does; "plain" is a
// net/http server answering a fixed 202 JSON (bench/ceiling's), driven the
// same way in the same run. So allocs/op is the server's (and, for register,
// kfake's, in this process), and the api's ns/op over plain's is its cost
// over a server that does nothing. cpu-ns/op is the process's CPU (user and
// system, getrusage) per request: the server's and the client's, which is the
// same for both; on a shared machine it moves far less than ns/op, which
// counts the time the process waited for a core. Figures and command:
// BENCHMARKS.md.
func BenchmarkHotPaths(b *testing.B) {
	url, addr := benchAPI(b, func(cfg *httpapi.Config) {
		cfg.Throttle = httpapi.ThrottleConfig{StatusRate: 100_000, StatusBurst: 100_000, Period: time.Minute}
	})
	host := url[len("http://"):]
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	toks := benchPlaces(b, url, rdb, 1000)

	b.Run("plain", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		body := []byte(`{"status":"QUEUED","itemId":"concert-2026","userId":"ceiling-user-0000000000","tokenId":"CEILINGCEILINGCEILINGCEILI","position":1234,"waitingTotal":56789}`)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header()["Content-Type"] = []string{"application/json; charset=utf-8"}
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write(body)
		})}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		reqs := make([][]byte, len(toks))
		for i, tok := range toks {
			reqs[i] = []byte("GET /api/v1/items/drop/registrations/" + tok + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
		}
		rawLoop(b, ln.Addr().String(), http.StatusAccepted, func(i int, buf []byte) []byte { return append(buf, reqs[i%len(reqs)]...) })
	})
	b.Run("status", func(b *testing.B) {
		reqs := make([][]byte, len(toks))
		for i, tok := range toks {
			reqs[i] = []byte("GET /api/v1/items/drop/registrations/" + tok + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
		}
		for i := range reqs { // the first, exact read of each
			rawOne(b, host, http.StatusOK, reqs[i])
		}
		rawLoop(b, host, http.StatusOK, func(i int, buf []byte) []byte { return append(buf, reqs[i%len(reqs)]...) })
	})
	b.Run("register", func(b *testing.B) {
		head := "POST /api/v1/items/drop/registrations HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\nContent-Length: "
		run := strconv.FormatInt(time.Now().UnixNano(), 36)
		rawLoop(b, host, http.StatusAccepted, func(i int, buf []byte) []byte {
			// {"userId":"hp-<run>-<i>"}
			n := len(`{"userId":"hp-`) + len(run) + 1 + len(strconv.Itoa(i)) + len(`"}`)
			buf = strconv.AppendInt(append(buf, head...), int64(n), 10)
			buf = append(buf, "\r\n\r\n"...)
			buf = append(append(append(buf, `{"userId":"hp-`...), run...), '-')
			return append(strconv.AppendInt(buf, int64(i), 10), `"}`...)
		})
	})
}

// BenchmarkRegisterConcurrent drives registrations from 64 connections at
// once, each sending its next as soon as its last is answered (wrk -c64's
// closed loop), against apis whose producer lingers 0, 1 ms and 2 ms, made
// up front (each with its own kfake and redis-server) so the sub-benchmarks
// alternate in one process. Under such a load the registrations of a produce
// request depend on the linger, which BenchmarkHotPaths' one connection
// cannot show: each of its registrations is a request alone. cpu-ns/op is
// the process's CPU per registration: the api's, kfake's (which takes the
// produce requests) and the client's. Figures and command: BENCHMARKS.md.
func BenchmarkRegisterConcurrent(b *testing.B) {
	lingers := []time.Duration{0, time.Millisecond, 2 * time.Millisecond}
	hosts := make([]string, len(lingers))
	for i, l := range lingers {
		url, _ := benchAPI(b, func(cfg *httpapi.Config) { cfg.ProduceLinger = l })
		hosts[i] = url[len("http://"):]
	}
	for i, l := range lingers {
		b.Run("linger="+l.String(), func(b *testing.B) { concurrentRegistrations(b, hosts[i], 64) })
	}
}

// concurrentRegistrations sends b.N registrations to host over conns
// connections, one at a time on each, and checks every answer is a 202.
func concurrentRegistrations(b *testing.B, host string, conns int) {
	head := "POST /api/v1/items/drop/registrations HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\nContent-Length: "
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	cs := make([]net.Conn, conns)
	for i := range cs {
		c, err := net.Dial("tcp", host)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for _, c := range cs {
		wg.Go(func() {
			r := bufio.NewReaderSize(c, 16<<10)
			buf, body := make([]byte, 0, 1024), make([]byte, 0, 64)
			for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
				// {"userId":"hc-<run>-<i>"}
				body = strconv.AppendInt(append(append(append(body[:0], `{"userId":"hc-`...), run...), '-'), i, 10)
				body = append(body, `"}`...)
				buf = strconv.AppendInt(append(buf[:0], head...), int64(len(body)), 10)
				buf = append(append(buf, "\r\n\r\n"...), body...)
				if _, err := c.Write(buf); err != nil {
					b.Error(err)
					return
				}
				if got, err := readAnswer(r); err != nil || got != http.StatusAccepted {
					b.Errorf("registration %d: answer %d, %v; want 202", i, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// rawOne sends req on a connection of its own and checks the answer's code.
func rawOne(b *testing.B, addr string, code int, req []byte) {
	b.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(req); err != nil {
		b.Fatal(err)
	}
	if got, err := readAnswer(bufio.NewReader(c)); err != nil || got != code {
		b.Fatalf("answer %d, %v; want %d", got, err, code)
	}
}

// rawLoop sends b.N requests, one at a time on one connection, each built by
// build into a reused buffer, and checks every answer's code.
func rawLoop(b *testing.B, addr string, code int, build func(i int, buf []byte) []byte) {
	b.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReaderSize(c, 16<<10)
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for i := 0; i < b.N; i++ {
		buf = build(i, buf[:0])
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if got, err := readAnswer(r); err != nil || got != code {
			b.Fatalf("request %d: answer %d, %v; want %d", i, got, err, code)
		}
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU the process has used so far (user and system).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// readAnswer reads one HTTP/1.1 answer with a Content-Length and returns its
// status code, allocating nothing.
func readAnswer(r *bufio.Reader) (int, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 {
		return 0, io.ErrUnexpectedEOF
	}
	code := int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	n := -1
	for {
		line, err = r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			break
		}
		const cl = "content-length:"
		if len(line) > len(cl) && bytes.EqualFold(line[:len(cl)], []byte(cl)) {
			n = 0
			for _, ch := range bytes.TrimSpace(line[len(cl):]) {
				n = n*10 + int(ch-'0')
			}
		}
	}
	if n < 0 {
		return 0, io.ErrUnexpectedEOF
	}
	_, err = r.Discard(n)
	return code, err
}
