package sse

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/fieldmac"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/liveness"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// EventsPath is the stream's route; the token segment is the queue token, or
// "current" with the token in an Authorization bearer or ?token=.
const EventsPath = "/api/v1/items/:itemId/registrations/:token/events"

// Options tune the streams. Zero values take the defaults.
type Options struct {
	// Heartbeat is how often an idle stream gets a ": ping" comment (15 s).
	Heartbeat time.Duration
	// Retry is the reconnection delay told to EventSource (3 s).
	Retry time.Duration
	// WriteTimeout bounds one write: a client that stops reading is dropped
	// after it (10 s).
	WriteTimeout time.Duration
	// Refresh is how often, at most, a stream re-reads its exact position from
	// Redis while admission events arrive (5 s, jittered ±25%); negative: never.
	Refresh time.Duration
	// IdleRefresh is how long a stream without admission events waits before
	// re-reading its exact position, checked at each heartbeat (60 s): it
	// catches people ahead who left while admission is paused.
	IdleRefresh time.Duration
	// PendingPoll caps how often a registration not yet in the line is re-read
	// (500 ms): the first re-read comes after 25 ms, then the delay doubles.
	PendingPoll time.Duration
	// ItemPoll is how often the item cache is re-judged for closed or sold out items (500 ms).
	ItemPoll time.Duration
	// ReadTimeout bounds one Redis read (2 s).
	ReadTimeout time.Duration
	// PositionEvery paces position events: at most one per interval per
	// stream, the latest state at its end (1 s; negative: every change at
	// once). Admission and final states are never held.
	PositionEvery time.Duration
	// RefreshRate caps the exact reads (Refresh, IdleRefresh) of all streams
	// together per second, so Redis load does not grow with the streams: a
	// stream that finds the budget spent reads later (1,000/s; negative: no
	// cap). Reads at connect are capped by OpenRate; reads to confirm an
	// admission are never capped.
	RefreshRate int
	// StreamsPerToken caps the streams open at once for one queue token (its
	// tokenId): past it a stream is refused 429 TOO_MANY_STREAMS (3;
	// negative: no cap).
	StreamsPerToken int
	// StreamsPerAddress caps the streams open at once from one client
	// address (gin's ClientIP: an IPv4 address, or an IPv6 /64; loopback is
	// not counted): 429 TOO_MANY_STREAMS (1,000; negative: no cap). Keep it
	// generous: thousands of people share an address behind a carrier's NAT.
	// An engine that serves Routes should set its trusted proxies (Run does,
	// from WR_TRUSTED_PROXIES): gin otherwise believes anyone's
	// X-Forwarded-For, and a client could count its streams to another's address.
	StreamsPerAddress int
	// MaxStreams caps the streams open at once on this server: past it a
	// stream is refused 503 NOTIFIER_FULL (100,000; negative: no cap).
	MaxStreams int
	// OpenRate caps the streams that open per second, each with its reads
	// from Redis (the view's confirmation, the status), with a second's
	// worth of burst (2,000; negative: no cap). An open past the budget waits
	// for its turn up to OpenWait, and is refused 503 NOTIFIER_BUSY with
	// Retry-After when its turn is further.
	OpenRate int
	// OpenWait is how long an open waits at most for the OpenRate budget
	// (1 s; negative: not at all).
	OpenWait time.Duration
	// NoHijack keeps every stream on net/http's handler (as HTTP/2 streams
	// always are), for middleware that must see the response end. It costs
	// about 40 KiB per stream instead of about 7-11 (BenchmarkStreams).
	NoHijack bool
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Heartbeat, 15*time.Second)
	def(&o.Retry, 3*time.Second)
	def(&o.WriteTimeout, 10*time.Second)
	def(&o.Refresh, 5*time.Second)
	def(&o.IdleRefresh, 60*time.Second)
	def(&o.PendingPoll, 500*time.Millisecond)
	def(&o.ItemPoll, 500*time.Millisecond)
	def(&o.ReadTimeout, 2*time.Second)
	def(&o.PositionEvery, time.Second)
	def(&o.OpenWait, time.Second)
	defInt := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	defInt(&o.RefreshRate, 1000)
	defInt(&o.StreamsPerToken, 3)
	defInt(&o.StreamsPerAddress, 1000)
	defInt(&o.MaxStreams, 100000)
	defInt(&o.OpenRate, 2000)
	return o
}

// Server serves the event streams.
type Server struct {
	hub    *Hub
	line   *queue.Line
	items  Items
	signer *token.Signer // verifies queue tokens
	admit  *token.Signer // signs admission tokens
	opt    Options
	m      *Metrics
	log    *zap.Logger
	now    func() time.Time
	open   sync.WaitGroup // streams running off their handler (hijacked)
	reads  *rate.Limiter  // exact reads for refreshes: RefreshRate a second, one second's worth of burst
	places *placeReads    // the exact reads, an item's due together in one round trip
	caps   *streamCaps    // open streams per token, per address, in all
	opens  *openGate      // the reads at connect: OpenRate a second
	view   *view.Watcher  // nil: the view is always trusted (SetView)
	lost   lostView       // ends the open streams when the view is lost or the hub stopped
	blocks Blocks         // nil: nobody is blocked (SetBlocks)

	// seen, when set, counts open streams as signs of life (SetSeen).
	seen *liveness.Tracker
	// cursors signs the cursors in event ids (SetCursorKey).
	cursors *fieldmac.Signer
}

// Blocks is the operator's block list in memory (*blocklist.List).
type Blocks interface {
	User(userID string) (topics.BlockState, bool)
}

// SetBlocks refuses to open a stream for a blocked user (403 BLOCKED, the
// api's answer; the page then reads its status: BLOCKED).
func (s *Server) SetBlocks(b Blocks) { s.blocks = b }

// NewServer returns a Server streaming from hub, reading positions from rdb
// and items from items (nil: no ETA from the configured rate).
func NewServer(hub *Hub, rdb redis.UniversalClient, items Items, signer, admit *token.Signer, opt Options, m *Metrics, log *zap.Logger) *Server {
	s := &Server{hub: hub, line: queue.New(rdb), items: items, signer: signer, admit: admit,
		opt: opt.withDefaults(), m: m, log: log, now: time.Now, cursors: fieldmac.Random()}
	s.reads = rate.NewLimiter(rate.Inf, 0)
	if n := s.opt.RefreshRate; n > 0 {
		s.reads = rate.NewLimiter(rate.Limit(n), n)
	}
	s.places = newPlaceReads(s.line, s.opt.ReadTimeout)
	s.caps = newStreamCaps(s.opt.StreamsPerToken, s.opt.StreamsPerAddress, s.opt.MaxStreams)
	s.opens = newOpenGate(s.opt.OpenRate, s.opt.OpenWait)
	s.lost.regain()
	if hub != nil { // nil: a server built for its Routes alone (the spec test)
		hub.afterStop(s.lost.end)
	}
	return s
}

// Options returns the options in force (defaults filled in).
func (s *Server) Options() Options { return s.opt }

// wantsSeen reports whether item releases idle places (an idleTimeout),
// the only items whose streams' signs of life are flushed to Redis.
func (s *Server) wantsSeen(item string) bool {
	if s.items == nil {
		return true
	}
	it, ok := s.items.Get(item)
	return ok && it.IdleTimeoutSeconds > 0
}

// SetSeen makes every open stream of a waiting place a sign of life for
// items with an idleTimeout (nil: none). Call before serving.
func (s *Server) SetSeen(t *liveness.Tracker) { s.seen = t }

// Routes adds the stream route to r, which may be the engine of another
// service (the API's front door, a page's): the route shares nothing else.
func (s *Server) Routes(r gin.IRouter) {
	r.GET(EventsPath, s.events)
}

// openAt decides where a stream starts: from a valid cursor (the last event
// id) with no Redis read, else after the open budget and the view's check,
// from the line's status read in Redis; on a refusal it has answered and ok
// is false.
func (s *Server) openAt(c *gin.Context, q token.Queue, str *stream, raw string) (st line.Status, ok bool) {
	ctx := c.Request.Context()
	if cur, ok := s.checkCursor(q.ItemID, q.TokenID, raw); ok {
		// A valid cursor: no Redis read, so neither the open budget nor the
		// view's confirmation in Redis (the cursor's MAC already holds the
		// generation in memory); the view's state in memory still gates.
		if view.GateItem(c, s.view, q.ItemID) {
			return st, false
		}
		s.lost.regain()
		str.resume = &cur
		s.m.cursorOpens.Inc()
	} else {
		if after, ok, err := s.opens.pass(ctx); err != nil {
			return st, false // the client left while it waited
		} else if !ok {
			s.m.refused[refusedOpenRate].Inc()
			httpserver.Abort(c, refusal(refusedOpenRate, s.opt.OpenRate, after))
			return st, false
		}
		if !s.gateView(c, q.ItemID) {
			return st, false
		}
		rctx, cancel := s.readCtx(ctx)
		var err error
		st, err = s.line.Status(rctx, q.ItemID, q.PlaceKey(), q.TokenID, q.Partition, q.Offset)
		cancel()
		if err != nil {
			s.log.Warn("read status for a stream", zap.String("item", q.ItemID), zap.Error(err))
			httpserver.Abort(c, registration.Unavailable("the line cannot be read right now; retry shortly"))
			return st, false
		}
	}
	return st, true
}

// events authorizes the request, takes the stream's slot under the caps,
// waits for its turn to read Redis, reads where the token stands, and only
// then opens the stream, so every refusal is a plain JSON answer. The slot
// is given back when the stream ends, however it ends.
//
// Where the stream then waits sets what it costs (BENCHMARKS: h2c memory): a
// hijacked HTTP/1.1 stream goes on in a goroutine of its own and this
// handler returns; one that cannot be hijacked (HTTP/2) is handed back to
// the Front, when one serves this engine, to wait below the HTTP/2 server's
// frames alone (net/http's, or pkg/web/h2c's, which also drops the request
// and keeps no buffer: WR_SSE_H2C_SERVER); else it waits here, below
// gin's. The open's deep work (the token, Redis, JSON, logs) runs in
// functions that have returned before the wait, so the frames under the
// waiting loop stay small: the runtime halves a parked goroutine's stack at
// a GC only while less than a quarter of it is in use.
func (s *Server) events(c *gin.Context) {
	o := s.accept(c)
	if o == nil {
		return
	}
	defer o.sl.release()    // a panic before the stream runs; nothing once it was handed on
	c.Status(http.StatusOK) // for the request metrics
	if conn := hijack(c, s.opt.NoHijack); conn != nil {
		s.goHijacked(o, conn)
		return
	}
	o.hw = openStream(c, s.now, s.opt.WriteTimeout)
	if h, ok := c.Request.Context().Value(handoffKey{}).(**opened); ok {
		*h = o.handOn() // the Front waits with it once gin has returned
		return
	}
	s.onHandler(c.Request.Context(), o)
}

// opened is a stream that passed every check of its open, with what it
// holds until it ends.
type opened struct {
	str    *stream
	status *line.Status // read at the open (nil: none, or acted on)
	sl     slot
	hw     *handlerWriter // the writer on net/http's handler (nil: hijacked)
}

// accept checks everything a stream's open checks and takes its slot; nil
// when refused (answered, the slot given back).
//
//go:noinline
func (s *Server) accept(c *gin.Context) *opened {
	q, err := registration.AuthorizeQueue(s.signer, c.Param("itemId"), httpserver.QueueTokenOf(c.Request, c.Param("token")))
	if err != nil {
		httpserver.Abort(c, err)
		return nil
	}
	if s.blocks != nil {
		if b, ok := s.blocks.User(q.UserID); ok {
			httpserver.Abort(c, registration.Blocked(b))
			return nil
		}
	}
	select {
	case <-s.hub.Stopped():
		httpserver.Abort(c, registration.ErrShuttingDown)
		return nil
	default:
	}
	sl, why := s.caps.take(q.TokenID, addressKey(c.ClientIP()))
	if why != "" {
		s.m.refused[why].Inc()
		httpserver.Abort(c, refusal(why, s.limitOf(why), s.opt.Retry))
		return nil
	}
	defer sl.release() // on a refusal (or a panic); nothing once handed on
	progress, raw := lastEventID(c)
	str := &stream{s: s, q: q, progress: progress}
	st, ok := s.openAt(c, q, str, raw)
	if !ok {
		return nil
	}
	return &opened{str: str, status: &st, sl: sl.hand()}
}

// handOn moves o to a new owner: o gives back nothing after it.
func (o *opened) handOn() *opened {
	n := *o
	n.sl = o.sl.hand()
	return &n
}

// goHijacked runs a hijacked stream in a goroutine of its own over the bare
// connection; the handler then returns, so net/http's request, buffers and
// deep handler stack are freed: an open stream costs its socket, a small
// stack and its struct (BENCHMARKS: bytes/stream).
func (s *Server) goHijacked(o *opened, conn net.Conn) {
	str, status, held := o.str, o.status, o.sl.hand()
	str.w, str.rc, str.conn = conn, connFlusher{conn}, conn
	s.m.streams.Inc()
	s.open.Add(1)
	go func() {
		defer s.open.Done()
		defer s.m.streams.Dec()
		defer conn.Close()
		// The slot first: a client that saw the end, or a stream the
		// gauge counts gone, finds it free.
		defer held.release()
		if str.write(hijackedHead(s.opt.Retry)) != nil {
			return
		}
		// Not the request's context, even without its cancel: it would
		// keep net/http's connection and request contexts, their done
		// channels and what the open's reads hung on them alive for the
		// stream's life (~0.9 KiB a stream; BENCHMARKS: bytes/stream).
		str.run(context.Background(), status)
	}()
}

// onHandler streams o on net/http's handler (HTTP/2, or HTTP/1.1 with
// NoHijack) until it ends: from events, when no Front serves the engine.
// Its frame stays under the stream's waiting loop, so the work is in
// functions that return before it.
//
//go:noinline
func (s *Server) onHandler(ctx context.Context, o *opened) {
	defer o.end()
	if o.begin(ctx) {
		o.str.loop(context.Background())
	}
}

// begin starts a stream on net/http's handler, whose request's context is
// ctx: counts it open, writes its retry field and acts on the status read
// at the open (stream.start); false: the stream already ended. The stream
// watches ctx's end (stream.gone); its reads do not hang on ctx.
//
//go:noinline
func (o *opened) begin(ctx context.Context) bool {
	status := o.status
	o.status = nil // o lives as long as the stream; the status only until it is acted on
	str := o.str
	str.w, str.rc, str.gone = o.hw, o.hw, ctx.Done()
	str.s.m.streams.Inc()
	if str.write(retryLine(str.s.opt.Retry)) != nil {
		return false
	}
	return !str.start(context.Background(), status)
}

// end gives back what a stream on net/http's handler held: the stream's
// own (stream.end), its slot (a client that saw the end, or a stream the
// gauge counts gone, finds it free), the gauge, then its writer (net/http's
// again).
func (o *opened) end() {
	o.str.end()
	o.sl.release()
	if o.str.w != nil { // counted by begin
		o.str.s.m.streams.Dec()
	}
	o.hw.stop()
}

// handoffKey marks a request's context when a Front serves it: its value,
// an **opened, is where events leaves a stream for the Front to wait with.
type handoffKey struct{}

// eventsPrefix and eventsSuffix are EventsPath's ends, which a Front
// recognizes a stream's request by.
var (
	eventsPrefix = EventsPath[:strings.IndexByte(EventsPath, ':')]
	eventsSuffix = EventsPath[strings.LastIndexByte(EventsPath, '/'):]
)

// Front returns next (the engine that serves Routes) behind a handler that
// serves the waiting part of the event streams itself. A stream that cannot
// be hijacked (HTTP/2) opens in next as any does (gin: every check and
// refusal, the request metrics), then waits below the HTTP/2 server's frames alone,
// gin's Context back in its pool: its goroutine's stack shrinks to 4 KiB
// (below gin's frames, to 8; BENCHMARKS: h2c memory). Serve it in place of
// next; every other request goes to next as it came, a stream's request
// with a context value more.
func (s *Server) Front(next http.Handler) http.Handler { return &front{s: s, next: next} }

type front struct {
	s    *Server
	next http.Handler
}

// ServeHTTP streams what next handed back until it ends. It is onHandler
// spelled out, one frame less under the stream's waiting loop: that frame
// was what kept the goroutine's stack from shrinking to 4 KiB.
func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o := f.open(w, r)
	if o == nil {
		return
	}
	defer o.end()
	if o.begin(r.Context()) {
		o.str.loop(context.Background())
	}
}

// open serves r in next and returns the stream next handed back to wait
// in the Front (nil: none; next answered).
//
//go:noinline
func (f *front) open(w http.ResponseWriter, r *http.Request) *opened {
	if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, eventsPrefix) || !strings.HasSuffix(r.URL.Path, eventsSuffix) {
		f.next.ServeHTTP(w, r)
		return nil
	}
	var o *opened
	f.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), handoffKey{}, &o)))
	return o
}

// limitOf is the cap a refusal of reason names.
func (s *Server) limitOf(reason string) int {
	switch reason {
	case refusedToken:
		return s.opt.StreamsPerToken
	case refusedAddress:
		return s.opt.StreamsPerAddress
	}
	return s.opt.MaxStreams
}

// Wait waits until every stream the server handed off has ended (after the
// hub stopped, they end at once), or ctx ends.
func (s *Server) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.open.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hijack takes an HTTP/1.x connection over from net/http; nil when the
// writer cannot be hijacked (HTTP/2).
func hijack(c *gin.Context, off bool) net.Conn {
	if off || c.Request.ProtoMajor != 1 {
		return nil
	}
	conn, _, err := c.Writer.Hijack()
	if err != nil {
		return nil
	}
	return conn
}

// hijackedHead is the response head of a hijacked stream and its retry
// field. The body ends when the connection closes (no chunking: the
// connection is ours now and is not reused).
func hijackedHead(retry time.Duration) []byte {
	return append([]byte("HTTP/1.1 200 OK\r\n"+
		"Content-Type: text/event-stream\r\n"+
		"Cache-Control: no-cache\r\n"+
		"X-Accel-Buffering: no\r\n"+
		"Connection: close\r\n\r\n"), retryLine(retry)...)
}

// connFlusher gives a bare connection the stream writer's controls: writes
// go straight to the socket, so there is nothing to flush.
type connFlusher struct{ net.Conn }

func (connFlusher) Flush() error { return nil }

// openStream writes the stream's headers and returns the writer to stream on:
// the server's own (so write errors reach us), its writes bounded by
// handlerWriter, or by the server when it bounds each write itself
// (pkg/web/h2c's SetWriteTimeout: no timer per stream between writes).
func openStream(c *gin.Context, now func() time.Time, timeout time.Duration) *handlerWriter {
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	c.Status(http.StatusOK)
	c.Writer.WriteHeaderNow()
	var w http.ResponseWriter = c.Writer
	if u, ok := w.(interface{ Unwrap() http.ResponseWriter }); ok {
		w = u.Unwrap() // gin's Flush swallows errors; the server's FlushError does not
	}
	hw := &handlerWriter{w: w, rc: http.NewResponseController(w), now: now}
	if b, ok := w.(writeBounder); ok {
		b.SetWriteTimeout(timeout)
		hw.bounded = true
	}
	return hw
}

// writeBounder is a response writer that fails and resets a write that
// waits longer than the timeout set, and leaves an idle stream alone
// (pkg/web/h2c's).
type writeBounder interface{ SetWriteTimeout(d time.Duration) }

// handlerWriter is a stream's writer on net/http's handler (HTTP/2, or
// HTTP/1.1 with NoHijack). A write is bounded by a timer of its own, stopped
// once the write is out, which when it fires sets the writer's deadline in
// the past: the stuck write fails and, on HTTP/2, the stream is reset,
// while the connection's other streams go on. net/http's HTTP/2 write
// deadline cannot be left armed between writes as a socket's can: when it
// passes it resets the stream, written to or not, so an idle stream (a
// heartbeat each 15 s, the deadline 10 s after a write) would be cut.
type handlerWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	now func() time.Time

	mu      sync.Mutex // orders expire against stop
	timer   *time.Timer
	done    bool // the handler returned: the writer is net/http's again
	bounded bool // the writer bounds each write itself (writeBounder): no timer here
}

// Write writes b to the response (buffered until Flush on HTTP/2).
func (h *handlerWriter) Write(b []byte) (int, error) { return h.w.Write(b) }

// SetWriteDeadline arms the timer that fails the write unless Flush comes before t.
func (h *handlerWriter) SetWriteDeadline(t time.Time) error {
	if h.bounded {
		return nil
	}
	d := t.Sub(h.now())
	if h.timer == nil {
		h.timer = time.AfterFunc(d, h.expire)
	} else {
		h.timer.Reset(d)
	}
	return nil
}

// Flush sends what was written and disarms the timer.
func (h *handlerWriter) Flush() error {
	err := h.rc.Flush()
	if h.timer != nil {
		h.timer.Stop()
	}
	if err != nil {
		return fmt.Errorf("flush a stream: %w", err)
	}
	return nil
}

// expire fails the write in progress (the client stopped reading).
func (h *handlerWriter) expire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done {
		_ = h.rc.SetWriteDeadline(time.Unix(1, 0))
	}
}

// stop disarms the timer for good; the handler returns after it.
func (h *handlerWriter) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = true
	if h.timer != nil {
		h.timer.Stop()
	}
}
