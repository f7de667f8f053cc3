// Package h2c is a cleartext HTTP/2 server (prior knowledge: a front door's
// upstream connection) built for many long-lived event streams on few
// connections: a stream costs its handler's goroutine and a small record,
// with no per-stream write buffer, and the writes of all a connection's
// streams leave in one syscall per batch. Framing and HPACK are
// golang.org/x/net/http2's Framer and hpack; this package keeps the
// connection's state: settings, flow control on send, the stream bound,
// flood bounds, GOAWAY. Requests with a body are refused (413): it serves
// the notifier, whose routes are GETs.
package h2c

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
)

// Server serves HTTP/2 connections with Handler.
type Server struct {
	Handler http.Handler
	// MaxStreams is SETTINGS_MAX_CONCURRENT_STREAMS: the requests one
	// connection may have open at once; past it a stream is refused
	// (REFUSED_STREAM, which a client may retry on another connection). A
	// stream counts until its handler returned, even after the client reset it.
	MaxStreams uint32
	// ReadHeaderTimeout bounds the client preface and the client's first
	// SETTINGS (5 s).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a connection that carries no stream for this long (120 s).
	IdleTimeout time.Duration
	// WriteTimeout bounds one write to the socket: a peer that takes nothing
	// for this long loses the connection (30 s).
	WriteTimeout time.Duration
	// MaxHeaderListSize bounds a request's headers (SETTINGS_MAX_HEADER_LIST_SIZE,
	// 64 KiB): past it the request is answered 431.
	MaxHeaderListSize uint32
	// MaxQueuedBytes bounds the bytes queued for the socket on a connection
	// (256 KiB): a handler's write past it waits (its write deadline bounds that).
	MaxQueuedBytes int
	// Log, when set, is told of connection errors (debug) and handler panics.
	Log *zap.Logger

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shutdown bool
	wg       sync.WaitGroup
}

// initLocked sets the defaults and the connection set on first use (s.mu
// held): a Server is usable as a literal.
func (s *Server) initLocked() {
	if s.conns == nil {
		s.defaults()
		s.conns = map[*conn]struct{}{}
	}
}

func (s *Server) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&s.ReadHeaderTimeout, 5*time.Second)
	def(&s.IdleTimeout, 120*time.Second)
	def(&s.WriteTimeout, 30*time.Second)
	if s.MaxHeaderListSize == 0 {
		s.MaxHeaderListSize = 64 << 10
	}
	if s.MaxQueuedBytes <= 0 {
		s.MaxQueuedBytes = 256 << 10
	}
	if s.MaxStreams == 0 {
		s.MaxStreams = 250
	}
	if s.Log == nil {
		s.Log = zap.NewNop()
	}
}

// ErrServerClosed is ServeConn's answer after Shutdown.
var ErrServerClosed = errors.New("h2c: server closed")

// ServeConn serves nc, whose client preface has not been read yet (or
// only peeked at: see Split), until the connection ends.
func (s *Server) ServeConn(nc net.Conn) error { return s.serveConn(nc, false) }

func (s *Server) serveConn(nc net.Conn, prefaceRead bool) error {
	c, err := s.add(nc)
	if err != nil {
		_ = nc.Close()
		return err
	}
	defer s.wg.Done()
	defer s.remove(c)
	return c.serve(prefaceRead)
}

func (s *Server) add(nc net.Conn) (*conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	if s.shutdown {
		return nil, ErrServerClosed
	}
	c := newConn(s, nc)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return c, nil
}

func (s *Server) remove(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// Shutdown sends every connection GOAWAY: it takes no new stream, and
// closes once its open streams ended. It waits for that until ctx ends,
// then closes what is left (their streams' contexts canceled).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.initLocked()
	s.shutdown = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.goAway(http2.ErrCodeNo, false)
	}
	idle := make(chan struct{})
	go func() { s.wg.Wait(); close(idle) }()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	for c := range s.conns {
		c.abort(ErrServerClosed)
	}
	s.mu.Unlock()
	<-idle
	return fmt.Errorf("drain h2c connections: %w", ctx.Err())
}
