package h2c

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Flow-control and flood constants.
const (
	initialWindow = 65535     // RFC 9113 6.9.2
	maxWindow     = 1<<31 - 1 // RFC 9113 6.9.1
	maxReadFrame  = 16 << 10  // SETTINGS_MAX_FRAME_SIZE we announce (the default)
	// floodWindow is the window the flood bounds count in: past
	// maxPings PINGs, maxSettings SETTINGS or maxResets RST_STREAMs
	// (at least; the stream bound more) from the client in one window, the
	// connection is told ENHANCE_YOUR_CALM and closed.
	floodWindow = time.Second
	maxPings    = 100
	maxSettings = 100
	maxResets   = 200
)

// errConnClosed fails the writes of a connection that ended.
var errConnClosed = errors.New("h2c: connection closed")

// conn is one HTTP/2 connection: a reader goroutine (serve) that applies
// the client's frames, a writer goroutine that sends what is queued in
// out, one batch per syscall, and a goroutine per open request.
type conn struct {
	s      *Server
	nc     net.Conn
	rd     *http2.Framer // the reader's
	remote string
	kick   chan struct{} // wakes the writer (capacity 1)

	mu   sync.Mutex
	cond sync.Cond // on mu: a write waiting for a window, for queue room, or for its stream's end
	// out is what is queued for the socket; wf, the writing Framer, and the
	// HPACK encoder write into it under mu, so frames leave in the order
	// they were made.
	out                                   []byte
	wf                                    *http2.Framer
	henc                                  *hpack.Encoder
	hbuf                                  bytes.Buffer
	streams                               map[uint32]*stream // open streams (their handler runs), by id
	active                                int                // handlers running, reset or not
	maxID                                 uint32             // the highest stream id the client opened
	win                                   int64              // the connection's send window
	recvWin                               int64              // the client's DATA it may still send (our receive window)
	recvUsed                              int64              // DATA taken since our last WINDOW_UPDATE
	initWin                               int64              // the client's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrame                              int                // the client's SETTINGS_MAX_FRAME_SIZE
	sentGoAway, peerGoAway, closing, dead bool
	waitQ                                 bool // a write waits for queue room: the writer broadcasts after a batch
	idle                                  *time.Timer
	floods                                [3]flood // pings, settings, resets
}

// flood counts events in floodWindow.
type flood struct {
	start time.Time
	n     int
}

// hit counts one event at now; true when more than limit fell in the window.
func (f *flood) hit(now time.Time, limit int) bool {
	if now.Sub(f.start) > floodWindow {
		f.start, f.n = now, 0
	}
	f.n++
	return f.n > limit
}

// outWriter is the writing Framer's io.Writer: the connection's queue
// (written under conn.mu).
type outWriter struct{ c *conn }

func (w outWriter) Write(p []byte) (int, error) {
	w.c.out = append(w.c.out, p...)
	return len(p), nil
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String(), kick: make(chan struct{}, 1),
		streams: map[uint32]*stream{}, win: initialWindow, initWin: initialWindow, maxFrame: maxReadFrame,
		recvWin: initialWindow}
	c.cond.L = &c.mu
	c.wf = http2.NewFramer(outWriter{c}, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.rd = http2.NewFramer(nil, nc)
	c.rd.SetMaxReadFrameSize(maxReadFrame)
	c.rd.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.rd.MaxHeaderListSize = s.MaxHeaderListSize
	return c
}

// serve reads the preface (unless read already) and the client's frames
// until the connection ends; the writer runs beside it.
func (c *conn) serve(prefaceRead bool) error {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.s.ReadHeaderTimeout))
	if !prefaceRead {
		var preface [len(http2.ClientPreface)]byte
		if _, err := io.ReadFull(c.nc, preface[:]); err != nil || string(preface[:]) != http2.ClientPreface {
			_ = c.nc.Close()
			return fmt.Errorf("read the client preface from %s: %w", c.remote, errors.Join(err, errBadPreface))
		}
	}
	c.mu.Lock()
	_ = c.wf.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.s.MaxStreams},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.s.MaxHeaderListSize},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: maxReadFrame})
	c.idle = time.AfterFunc(c.s.IdleTimeout, c.onIdle)
	c.mu.Unlock()
	writer := make(chan struct{})
	go func() { defer close(writer); c.writeLoop() }()
	c.poke()
	err, flush := c.readLoop()
	if !flush { // else the writer sends the GOAWAY, then closes (closeWrite)
		c.abort(err)
	}
	<-writer
	return err
}

var errBadPreface = errors.New("not the HTTP/2 client preface")

// readLoop applies the client's frames until the connection ends or
// fails; its first frame must be SETTINGS, within ReadHeaderTimeout. flush:
// it failed the connection with a GOAWAY, which the writer sends before
// the socket closes.
//
//nolint:revive // the error first reads better with flush beside it
func (c *conn) readLoop() (err error, flush bool) {
	first := true
	for {
		f, err := c.rd.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				c.resetStream(se.StreamID, se.Code)
				continue
			}
			// The Framer's connection errors, and a frame past our
			// SETTINGS_MAX_FRAME_SIZE, which it reports apart.
			var ce http2.ConnectionError
			code, connErr := http2.ErrCodeFrameSize, errors.Is(err, http2.ErrFrameTooLarge)
			if errors.As(err, &ce) {
				code, connErr = http2.ErrCode(ce), true
			}
			if connErr {
				c.goAway(code, true)
				return fmt.Errorf("read a frame from %s: %w", c.remote, err), true
			}
			return fmt.Errorf("read a frame from %s: %w", c.remote, err), false
		}
		if first {
			if _, ok := f.(*http2.SettingsFrame); !ok {
				c.goAway(http2.ErrCodeProtocol, true)
				return fmt.Errorf("first frame from %s: %s, not SETTINGS", c.remote, f.Header().Type), true
			}
			first = false
			_ = c.nc.SetReadDeadline(time.Time{})
		}
		code := c.apply(f)
		if code == http2.ErrCodeNo && c.overQueued() {
			code = http2.ErrCodeEnhanceYourCalm
		}
		if code != http2.ErrCodeNo {
			c.goAway(code, true)
			return fmt.Errorf("frame %s from %s: %w", f.Header().Type, c.remote, http2.ConnectionError(code)), true
		}
	}
}

// overQueued reports a client that makes the connection answer (pings,
// refused or reset streams, settings) faster than it reads: the queue past
// what the handlers' writes may fill (MaxQueuedBytes, a frame more, the
// streams' heads) by as much again. Nothing else bounds those answers'
// bytes while the writer waits on a socket the client does not read.
func (c *conn) overQueued() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.out) > 2*c.s.MaxQueuedBytes+int(c.s.MaxHeaderListSize)
}

// apply acts on one frame; a code other than NO_ERROR is a connection error.
func (c *conn) apply(f http2.Frame) http2.ErrCode {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.PingFrame:
		return c.onPing(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.GoAwayFrame:
		c.mu.Lock()
		c.peerGoAway = true
		c.closeIfDoneLocked()
		c.mu.Unlock()
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID { // RFC 9113 5.3.1
			c.resetStream(f.StreamID, http2.ErrCodeProtocol)
		}
	case *http2.PushPromiseFrame:
		return http2.ErrCodeProtocol // a client does not push
	}
	return http2.ErrCodeNo // PRIORITY otherwise, unknown frames: ignored
}

func (c *conn) onSettings(f *http2.SettingsFrame) http2.ErrCode {
	if f.IsAck() {
		return http2.ErrCodeNo
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.floods[1].hit(time.Now(), maxSettings) {
		return http2.ErrCodeEnhanceYourCalm
	}
	code := http2.ErrCodeNo
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				code = http2.ErrCode(ce)
			} else {
				code = http2.ErrCodeProtocol
			}
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.initWin
			for _, st := range c.streams {
				if st.win+delta > maxWindow {
					code = http2.ErrCodeFlowControl
					return errWindowOverflow
				}
				st.win += delta
			}
			c.initWin = int64(s.Val)
		case http2.SettingMaxFrameSize:
			c.maxFrame = int(s.Val)
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	if err != nil {
		return code
	}
	_ = c.wf.WriteSettingsAck()
	c.cond.Broadcast()
	c.pokeLocked()
	return http2.ErrCodeNo
}

var errWindowOverflow = errors.New("h2c: flow-control window past 2^31-1")

func (c *conn) onPing(f *http2.PingFrame) http2.ErrCode {
	if f.IsAck() {
		return http2.ErrCodeNo
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.floods[0].hit(time.Now(), maxPings) {
		return http2.ErrCodeEnhanceYourCalm
	}
	_ = c.wf.WritePing(true, f.Data)
	c.pokeLocked()
	return http2.ErrCodeNo
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) http2.ErrCode {
	c.mu.Lock()
	defer c.mu.Unlock()
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		if c.win+inc > maxWindow {
			return http2.ErrCodeFlowControl
		}
		c.win += inc
	} else if st := c.streams[f.StreamID]; st != nil {
		if st.win+inc > maxWindow {
			st.resetLocked(http2.ErrCodeFlowControl, true)
			return http2.ErrCodeNo
		}
		st.win += inc
	} else if f.StreamID > c.maxID {
		return http2.ErrCodeProtocol // an idle stream
	}
	c.cond.Broadcast()
	return http2.ErrCodeNo
}

func (c *conn) onReset(f *http2.RSTStreamFrame) http2.ErrCode {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID > c.maxID {
		return http2.ErrCodeProtocol // an idle stream
	}
	// A rapid reset (open, reset, again) frees no slot: a stream counts
	// until its handler returned. The rate is bounded too.
	if c.floods[2].hit(time.Now(), max(maxResets, 2*int(c.s.MaxStreams))) {
		return http2.ErrCodeEnhanceYourCalm
	}
	if st := c.streams[f.StreamID]; st != nil {
		st.resetLocked(f.ErrCode, false)
	}
	return http2.ErrCodeNo
}

// onData takes a request body's frames, which are refused (the handler
// answers 413) and dropped. Their bytes count against the connection's
// receive window (past it: FLOW_CONTROL_ERROR), and are given back in one
// WINDOW_UPDATE per half a window taken, only while the queue has room: a
// client that sends without reading is held by its own window, and a flood
// of small frames makes no answer of its own.
func (c *conn) onData(f *http2.DataFrame) http2.ErrCode {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID > c.maxID {
		return http2.ErrCodeProtocol // an idle stream
	}
	n := int64(f.Length) // padding included (RFC 9113 6.9.1)
	if n > c.recvWin {
		return http2.ErrCodeFlowControl
	}
	c.recvWin -= n
	c.recvUsed += n
	if c.recvUsed >= initialWindow/2 && len(c.out) < c.s.MaxQueuedBytes {
		_ = c.wf.WriteWindowUpdate(0, uint32(c.recvUsed)) //nolint:gosec // at most the window, < 2^31
		c.recvWin += c.recvUsed
		c.recvUsed = 0
		c.pokeLocked()
	}
	switch st := c.streams[f.StreamID]; {
	case st == nil || st.remoteClosed():
		// A closed stream (RFC 9113 5.1: STREAM_CLOSED), told so without
		// a record of closed streams, as net/http's server: a stream error,
		// which a client whose DATA was in flight to a stream reset here
		// ignores.
		c.rstLocked(f.StreamID, http2.ErrCodeStreamClosed)
	case st.waitBody:
		st.firstBodyLocked(len(f.Data()), f.StreamEnded())
	case f.StreamEnded():
		st.remoteOpen = false
	}
	return http2.ErrCodeNo
}

// rstLocked tells the client stream id is reset (code), with no record of it.
func (c *conn) rstLocked(id uint32, code http2.ErrCode) {
	_ = c.wf.WriteRSTStream(id, code)
	c.pokeLocked()
}

// resetStream resets stream id after a stream error the Framer found.
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.streams[id]; st != nil {
		st.resetLocked(code, true)
		return
	}
	if id > c.maxID {
		c.maxID = id // a refused stream is closed, not idle
	}
	c.rstLocked(id, code)
}

// goAway sends GOAWAY with code: no stream after the last one opened is
// taken. With fatal the connection then closes; without, it closes once
// its streams ended.
func (c *conn) goAway(code http2.ErrCode, fatal bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return
	}
	if !c.sentGoAway || fatal {
		c.sentGoAway = true
		_ = c.wf.WriteGoAway(c.maxID, code, nil)
	}
	if fatal {
		c.closing = true
	}
	c.closeIfDoneLocked()
	c.pokeLocked()
}

// closeIfDoneLocked closes the connection, once what is queued is written,
// when it takes no new stream and has none left.
func (c *conn) closeIfDoneLocked() {
	if (c.sentGoAway || c.peerGoAway) && c.active == 0 && !c.closing {
		if !c.sentGoAway {
			c.sentGoAway = true
			_ = c.wf.WriteGoAway(c.maxID, http2.ErrCodeNo, nil)
		}
		c.closing = true
		c.pokeLocked()
	}
}

// onIdle closes a connection that has carried no stream for IdleTimeout.
func (c *conn) onIdle() {
	c.mu.Lock()
	idle := c.active == 0
	c.mu.Unlock()
	if idle {
		c.goAway(http2.ErrCodeNo, true)
	}
}

// abort ends the connection at once: the socket closed, every stream's
// context canceled, every waiting write failed.
func (c *conn) abort(err error) {
	c.mu.Lock()
	first := !c.dead
	c.dead, c.closing = true, true
	if c.idle != nil {
		c.idle.Stop()
	}
	for _, st := range c.streams {
		st.endLocked()
	}
	c.cond.Broadcast()
	c.pokeLocked()
	c.mu.Unlock()
	_ = c.nc.Close()
	if first && err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		c.s.Log.Debug("h2c connection ended", zap.String("remote", c.remote), zap.Error(err))
	}
}

func (c *conn) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *conn) pokeLocked() { c.poke() }

// writeLoop writes what is queued, all of it in one write, until the
// connection closes: the events of many streams made meanwhile leave
// together.
func (c *conn) writeLoop() {
	var spare []byte
	for {
		c.mu.Lock()
		b, closing := c.out, c.closing
		c.out = spare[:0]
		if c.waitQ {
			c.waitQ = false
			c.cond.Broadcast()
		}
		c.mu.Unlock()
		if len(b) > 0 {
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.WriteTimeout))
			if _, err := c.nc.Write(b); err != nil {
				c.abort(fmt.Errorf("write to %s: %w", c.remote, err))
				return
			}
		}
		if closing {
			c.closeWrite()
			return
		}
		spare = nil
		if cap(b) <= 8<<10 { // a large batch's buffer is not kept: 100s of connections would each hold one
			spare = b
		}
		if len(b) == 0 {
			<-c.kick
		}
	}
}

// closeWrite ends a connection whose last frames (a GOAWAY) were written:
// its sending half first, so the client reads them before it sees the
// close (a close with its frames unread would reset the connection), and
// the whole connection a second later, or when the client closes its half.
func (c *conn) closeWrite() {
	c.mu.Lock()
	dead := c.dead
	c.mu.Unlock()
	if dead {
		return
	}
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		time.AfterFunc(time.Second, func() { c.abort(nil) })
		return
	}
	c.abort(nil)
}
