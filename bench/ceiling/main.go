// Command ceiling is the benchmark harness's ceiling: a plain net/http server
// that answers every request with a fixed 202 JSON body, knowing nothing. The
// api measured with the same load in the same run, divided by this, is a
// figure that survives the ±30% drift of a shared machine (bench/ceiling.sh).
//
// With -server fasthttp the same answer comes from a fasthttp server
// instead, a comparison only: what another HTTP/1.1 server costs a request,
// and what waiting costs it (-hold), beside net/http's.
//
// It lives outside go.work (like k6/): build it with
//
//	cd bench/ceiling && GOWORK=off go build -o /tmp/wr-ceiling .
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/valyala/fasthttp"
)

// body is about the size of the api's status answer.
var body = []byte(`{"status":"QUEUED","itemId":"concert-2026","userId":"ceiling-user-0000000000","tokenId":"CEILINGCEILINGCEILINGCEILI","position":1234,"waitingTotal":56789}`)

const contentType = "application/json; charset=utf-8"

func main() {
	addr := flag.String("addr", "127.0.0.1:18099", "listen address")
	hold := flag.Duration("hold", 0, "answer each request this long after reading it, as a handler that waits for a broker's ack does (0: at once)")
	server := flag.String("server", "net", "the HTTP server: net (net/http) or fasthttp")
	flag.Parse()
	var err error
	switch *server {
	case "net":
		err = serveNet(*addr, *hold)
	case "fasthttp":
		err = serveFast(*addr, *hold)
	default:
		err = fmt.Errorf("-server %q: want net or fasthttp", *server)
	}
	fmt.Fprintln(os.Stderr, "ceiling:", err)
	os.Exit(1)
}

func serveNet(addr string, hold time.Duration) error {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body as a real handler must (the register path sends one).
		_, _ = io.Copy(io.Discard, r.Body)
		if hold > 0 {
			// A waiting handler parks. What that costs is mostly the
			// runtime's: a process whose handlers all wait is often idle,
			// and its threads sleep and are woken again. net/http adds a
			// read: its background read of the connection (started once the
			// body is read) runs, finds nothing and is woken at the answer.
			time.Sleep(hold)
		}
		hd := w.Header()
		hd["Content-Type"] = []string{contentType}
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(body)
	})
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	return srv.ListenAndServe()
}

// serveFast answers as serveNet does, from fasthttp, whose server reads a
// connection only between requests: a handler that waits costs it no read.
func serveFast(addr string, hold time.Duration) error {
	h := func(ctx *fasthttp.RequestCtx) {
		_ = ctx.PostBody() // read with the request, as fasthttp does
		if hold > 0 {
			time.Sleep(hold)
		}
		ctx.SetStatusCode(http.StatusAccepted)
		ctx.SetContentType(contentType)
		ctx.SetBody(body)
	}
	srv := &fasthttp.Server{Handler: h, ReadTimeout: 30 * time.Second}
	return srv.ListenAndServe(addr)
}
