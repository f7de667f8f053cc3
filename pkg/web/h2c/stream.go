package h2c

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// stream is one request: its state in the connection and the
// http.ResponseWriter its handler writes to. Once the response's head is
// out, it holds no header map: an open event stream costs this record,
// its context and its handler's goroutine.
type stream struct {
	c      *conn
	id     uint32
	status int32         // beside id: the record stays in a 64-byte size class
	win    int64         // send window
	header http.Header   // the response's, until its head is written (nil after)
	done   chan struct{} // the request's context's Done (made when asked for)
	timer  *time.Timer   // the write deadline (nil: none armed)
	wto    time.Duration // SetWriteTimeout's bound (0: none)
	// wroteHead: the HEADERS are out; reset: the stream was reset (by
	// either side), its writes fail; remoteOpen: the client has not ended
	// its side (a request body comes); ended: the request's context is
	// done; noBody: a HEAD, whose writes are dropped; waitBody: a refused
	// body's first DATA is awaited, to check it against bodyLen.
	wroteHead, reset, remoteOpen, ended, noBody, waitBody bool
	// bodyLen is the refused body's content-length, capped at maxBodyLen
	// (a DATA frame is smaller), or noBodyLen: a uint16 keeps the record
	// in 64 bytes.
	bodyLen uint16
}

// reqContext is a stream as its request's context: done when the stream
// is reset, its connection ends or its handler returned. The stream's own
// record, not a context.WithCancel of the connection's: that is a
// cancelCtx more and an entry in its parent's map for an open stream's life.
type reqContext stream

func (*reqContext) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is closed when the request ends.
func (x *reqContext) Done() <-chan struct{} {
	st := (*stream)(x)
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	if st.done == nil {
		st.done = make(chan struct{})
		if st.ended {
			close(st.done)
		}
	}
	return st.done
}

// Err is context.Canceled once the request ended.
func (x *reqContext) Err() error {
	st := (*stream)(x)
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	if st.ended {
		return context.Canceled
	}
	return nil
}

func (*reqContext) Value(any) any { return nil }

// endLocked ends the request's context.
func (st *stream) endLocked() {
	if st.ended {
		return
	}
	st.ended = true
	if st.done != nil {
		close(st.done)
	}
}

// Header is the response's header map, sent with the first write.
func (st *stream) Header() http.Header {
	if st.header == nil {
		st.header = http.Header{} // after the head: changes go nowhere, as net/http's
	}
	return st.header
}

// WriteHeader sets the status sent with the first write (informational
// statuses are not sent).
func (st *stream) WriteHeader(code int) {
	if code >= 200 && code <= 999 && st.status == 0 {
		st.status = int32(code)
	}
}

// Write queues p as DATA frames within the flow-control windows; it waits
// while they (or the connection's queue) are full, until the stream is
// reset or its write deadline passes.
func (st *stream) Write(p []byte) (int, error) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := st.headLocked(false); err != nil {
		return 0, err
	}
	if st.noBody {
		return len(p), nil
	}
	w := waiter{st: st}
	defer w.stop()
	n := 0
	for len(p) > 0 {
		if err := st.errLocked(); err != nil {
			return n, err
		}
		if len(c.out) >= c.s.MaxQueuedBytes {
			c.waitQ = true
			if err := w.wait(); err != nil {
				return n, err
			}
			continue
		}
		k := int(min(int64(len(p)), st.win, c.win, int64(c.maxFrame)))
		if k <= 0 {
			if err := w.wait(); err != nil {
				return n, err
			}
			continue
		}
		_ = c.wf.WriteData(st.id, false, p[:k])
		st.win -= int64(k)
		c.win -= int64(k)
		p, n = p[k:], n+k
	}
	c.pokeLocked()
	return n, nil
}

// waiter is one Write's waits for the windows or queue room, bounded by
// the stream's SetWriteTimeout from the write's first wait on: a timer
// exists only while a write waits.
type waiter struct {
	st    *stream
	until time.Time
	wake  *time.Timer
}

// wait waits (c.mu held) for a change of the windows, the queue or the
// stream; past the write timeout it resets the stream and fails.
func (w *waiter) wait() error {
	st, c := w.st, w.st.c
	if st.wto > 0 {
		now := time.Now()
		if w.until.IsZero() {
			w.until = now.Add(st.wto)
		}
		if !now.Before(w.until) {
			st.resetLocked(http2.ErrCodeCancel, true)
			return os.ErrDeadlineExceeded
		}
		if w.wake == nil {
			w.wake = time.AfterFunc(w.until.Sub(now), func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.cond.Broadcast()
			})
		}
	}
	c.pokeLocked() // what was queued goes out: the client's window updates follow its reads
	c.cond.Wait()
	return nil
}

func (w *waiter) stop() {
	if w.wake != nil {
		w.wake.Stop()
	}
}

// SetWriteTimeout bounds how long each later Write may wait for the
// flow-control windows or queue room: past d it fails and the stream is
// reset (0: no bound). Unlike a write deadline it never ends an idle
// stream, and it costs a timer only while a write waits, so an event
// stream needs no timer of its own between writes.
func (st *stream) SetWriteTimeout(d time.Duration) {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	st.wto = d
}

// Flush sends the head if it is not out yet (writes are sent as they come).
func (st *stream) Flush() { _ = st.FlushError() }

// FlushError is Flush, with the stream's failure (http.ResponseController).
func (st *stream) FlushError() error {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return st.headLocked(false)
}

// SetWriteDeadline resets the stream when t passes (at once when it has),
// failing a write that waits, as net/http's HTTP/2 does; zero disarms it.
func (st *stream) SetWriteDeadline(t time.Time) error {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.timer != nil {
		st.timer.Stop()
	}
	if t.IsZero() {
		return nil
	}
	d := time.Until(t)
	if d <= 0 {
		st.resetLocked(http2.ErrCodeCancel, true)
		return nil
	}
	if st.timer == nil {
		st.timer = time.AfterFunc(d, st.expire)
	} else {
		st.timer.Reset(d)
	}
	return nil
}

func (st *stream) expire() {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	st.resetLocked(http2.ErrCodeCancel, true)
}

// errLocked is why the stream cannot be written to (nil: it can).
func (st *stream) errLocked() error {
	switch {
	case st.c.dead:
		return errConnClosed
	case st.reset:
		return os.ErrDeadlineExceeded // reset by the client or at its write deadline
	}
	return nil
}

// resetLocked resets the stream: its writes fail, its context ends, and
// with send the client is told (RST_STREAM code).
func (st *stream) resetLocked(code http2.ErrCode, send bool) {
	if st.reset {
		return
	}
	st.reset = true
	st.endLocked()
	if send && !st.c.dead {
		st.c.rstLocked(st.id, code)
	}
	if st.waitBody { // no handler runs, whose end would give the slot back
		st.waitBody = false
		st.releaseLocked()
	}
	st.c.cond.Broadcast()
}

// headLocked writes the response's HEADERS once (end: with END_STREAM, no
// body follows).
func (st *stream) headLocked(end bool) error {
	if err := st.errLocked(); err != nil {
		return err
	}
	if st.wroteHead {
		return nil
	}
	st.wroteHead = true
	c := st.c
	c.hbuf.Reset()
	enc := func(k, v string) { _ = c.henc.WriteField(hpack.HeaderField{Name: k, Value: v}) }
	enc(":status", strconv.Itoa(int(max(st.status, 200))))
	for k, vs := range st.header {
		lk := strings.ToLower(k)
		if connectionSpecific(lk) {
			continue
		}
		for _, v := range vs {
			enc(lk, v)
		}
	}
	st.header = nil
	frag := c.hbuf.Bytes()
	first := true
	for first || len(frag) > 0 {
		k := min(len(frag), c.maxFrame)
		last := k == len(frag)
		if first {
			_ = c.wf.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: frag[:k], EndStream: end, EndHeaders: last})
		} else {
			_ = c.wf.WriteContinuation(st.id, last, frag[:k])
		}
		frag, first = frag[k:], false
	}
	c.pokeLocked()
	return nil
}

// connectionSpecific reports the header fields HTTP/2 forbids (RFC 9113 8.2.2).
func connectionSpecific(k string) bool {
	switch k {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		return true
	}
	return false
}

// finish ends the stream once its handler returned: END_STREAM (or the
// HEADERS with it), a reset when the client still sends a body, and its
// slot given back.
func (st *stream) finish() {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.errLocked() == nil {
		if !st.wroteHead {
			_ = st.headLocked(true)
		} else {
			_ = c.wf.WriteData(st.id, true, nil)
		}
		c.pokeLocked()
		if st.remoteOpen {
			c.rstLocked(st.id, http2.ErrCodeNo) // the body is not read
		}
	}
	st.reset = true // no write after the end
	if st.timer != nil {
		st.timer.Stop()
	}
	st.releaseLocked()
}

// releaseLocked forgets the stream and gives its slot back.
func (st *stream) releaseLocked() {
	c := st.c
	st.endLocked()
	delete(c.streams, st.id)
	c.active--
	if c.active == 0 && c.idle != nil && !c.dead {
		c.idle.Reset(c.s.IdleTimeout)
	}
	c.closeIfDoneLocked()
}

// onHeaders opens a stream for a request: refused past MaxStreams or after
// a GOAWAY, reset when malformed, answered 431 when its headers were cut at
// MaxHeaderListSize and 413 when it has a body (once its first DATA came:
// see awaitBody); else served by the Handler on a goroutine.
func (c *conn) onHeaders(f *http2.MetaHeadersFrame) http2.ErrCode {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := f.StreamID
	if id%2 == 0 {
		return http2.ErrCodeProtocol // a client opens odd streams
	}
	if st := c.streams[id]; st != nil {
		st.trailersLocked(f)
		return http2.ErrCodeNo
	}
	if id <= c.maxID {
		// A closed stream, or an id below one the client opened (RFC 9113
		// 5.1.1): with no record of closed streams they look alike, and
		// both are a connection error, as in net/http's server.
		return http2.ErrCodeProtocol
	}
	c.maxID = id
	if f.HasPriority() && f.Priority.StreamDep == id { // RFC 9113 5.3.1
		c.rstLocked(id, http2.ErrCodeProtocol)
		return http2.ErrCodeNo
	}
	if c.sentGoAway || c.peerGoAway || c.active >= int(c.s.MaxStreams) {
		c.rstLocked(id, http2.ErrCodeRefusedStream)
		return http2.ErrCodeNo
	}
	st := &stream{c: c, id: id, win: c.initWin, remoteOpen: !f.StreamEnded(), noBody: f.PseudoValue("method") == http.MethodHead}
	h := c.s.Handler
	r, err := c.request((*reqContext)(st), f)
	switch {
	case f.Truncated:
		h, err = refuse(http.StatusRequestHeaderFieldsTooLarge, "HEADERS_TOO_LARGE", "the request's headers are larger than this server takes"), nil
	case err == nil && st.remoteOpen && r.Header.Get("Content-Length") != "0":
		h, err = tooLarge, st.awaitBody(r.Header.Get("Content-Length"))
	}
	if err != nil { // malformed (RFC 9113 8.1.1): a stream error
		c.rstLocked(id, http2.ErrCodeProtocol)
		return http2.ErrCodeNo
	}
	c.streams[id] = st
	c.active++
	if c.idle != nil {
		c.idle.Stop()
	}
	if st.waitBody {
		// No handler runs yet, and the slot is held: a body that never
		// comes is reset, as net/http bounds a body by its read timeout.
		st.timer = time.AfterFunc(c.s.ReadHeaderTimeout, st.bodyLate)
	} else {
		go c.run(st, h, r)
	}
	return http2.ErrCodeNo
}

// bodyLate resets a stream whose refused body's first DATA did not come
// within ReadHeaderTimeout, giving its slot back.
func (st *stream) bodyLate() {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	if st.waitBody {
		st.resetLocked(http2.ErrCodeCancel, true)
	}
}

var tooLarge = refuse(http.StatusRequestEntityTooLarge, "BODY_NOT_ALLOWED", "this server takes no request body")

// bodyLen's bounds: a content-length past maxBodyLen is stored as
// maxBodyLen; noBodyLen is none given.
const (
	maxBodyLen = 0xFFFE
	noBodyLen  = 0xFFFF
)

// awaitBody holds the 413 of a body until its first DATA (or trailers),
// which is checked against its content-length (a mismatch is a malformed
// request, reset, not answered): the stream is then still open, where a
// 413 already sent would have closed it, and the client's frames before
// the body (RST_STREAM, WINDOW_UPDATE) find it open.
func (st *stream) awaitBody(contentLength string) error {
	st.waitBody, st.bodyLen = true, noBodyLen
	if contentLength == "" {
		return nil
	}
	n, err := strconv.ParseUint(contentLength, 10, 63)
	if err != nil {
		return errBadRequest
	}
	st.bodyLen = uint16(min(n, maxBodyLen))
	return nil
}

// firstBodyLocked takes the first DATA (n bytes of payload) of a body held
// by awaitBody: past its content-length, or short of it at its end, the
// request is malformed (RFC 9113 8.1.1) and reset; else it is answered 413.
func (st *stream) firstBodyLocked(n int, end bool) {
	if st.bodyLen != noBodyLen && (n > int(st.bodyLen) || (end && n != int(st.bodyLen))) {
		st.resetLocked(http2.ErrCodeProtocol, true)
		return
	}
	st.waitBody = false
	st.timer.Stop() // bodyLate's
	st.remoteOpen = !end
	go st.c.run(st, tooLarge, nil) // tooLarge reads no request
}

// remoteClosed reports a stream the client may send no more on (RFC 9113
// 5.1): reset, or its side ended; a DATA or HEADERS on it is answered
// STREAM_CLOSED. c.mu is held.
func (st *stream) remoteClosed() bool { return st.reset || !st.remoteOpen }

// trailersLocked takes a HEADERS frame on an open stream: a body's
// trailers (dropped) end the client's side; a HEADERS without END_STREAM
// or with pseudo-headers is malformed (RFC 9113 8.1), and one on a stream
// whose client side ended is on a closed stream (5.1).
func (st *stream) trailersLocked(f *http2.MetaHeadersFrame) {
	switch {
	case st.remoteClosed():
		st.c.rstLocked(st.id, http2.ErrCodeStreamClosed)
	case !f.StreamEnded() || len(f.PseudoFields()) > 0:
		st.resetLocked(http2.ErrCodeProtocol, true)
	case st.waitBody:
		st.firstBodyLocked(0, true) // trailers end an empty body
	default:
		st.remoteOpen = false
	}
}

// run serves one request; a panic resets the stream alone.
func (c *conn) run(st *stream, h http.Handler, r *http.Request) {
	defer st.finish()
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				c.s.Log.Error("h2c handler panic", zap.Any("panic", p), zap.Stack("stack"))
			}
			c.mu.Lock()
			st.resetLocked(http2.ErrCodeInternal, true)
			c.mu.Unlock()
		}
	}()
	h.ServeHTTP(st, r)
}

// request is the http.Request of a HEADERS frame, its context ctx.
func (c *conn) request(ctx context.Context, f *http2.MetaHeadersFrame) (*http.Request, error) {
	method, path := f.PseudoValue("method"), f.PseudoValue("path")
	if method == "" || f.PseudoValue("scheme") == "" || method == http.MethodConnect || path == "" || (path[0] != '/' && !(method == http.MethodOptions && path == "*")) {
		return nil, errBadRequest
	}
	u, err := url.ParseRequestURI(path)
	if err != nil {
		return nil, errBadRequest
	}
	fields := f.RegularFields()
	h := make(http.Header, len(fields))
	var cookies []string
	for _, hf := range fields {
		if connectionSpecific(hf.Name) || (hf.Name == "te" && hf.Value != "trailers") {
			return nil, errBadRequest // RFC 9113 8.2.2
		}
		if hf.Name == "cookie" { // split for compression (RFC 9113 8.2.3): one again
			cookies = append(cookies, hf.Value)
			continue
		}
		k := http.CanonicalHeaderKey(hf.Name)
		h[k] = append(h[k], hf.Value)
	}
	if len(cookies) > 0 {
		h["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	host := f.PseudoValue("authority")
	if host == "" {
		host = h.Get("Host")
	}
	r := &http.Request{Method: method, URL: u, Proto: "HTTP/2.0", ProtoMajor: 2, Header: h, Body: http.NoBody,
		Host: host, RemoteAddr: c.remote, RequestURI: path}
	return r.WithContext(ctx), nil
}

var errBadRequest = errors.New("h2c: malformed request")

// refuse answers every request status with the services' JSON error body.
func refuse(status int, code, message string) http.Handler {
	body := `{"error":{"code":` + strconv.Quote(code) + `,"message":` + strconv.Quote(message) + `}}`
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	})
}
