package h2c

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
)

// Split serves the connections of ln that open with the HTTP/2 client
// preface itself, and returns the listener of the others (HTTP/1.x), for
// net/http, their first bytes replayed. The preface is looked for off the
// accept loop, within ReadHeaderTimeout. Closing the returned listener
// closes ln.
func (s *Server) Split(ln net.Listener) net.Listener {
	s.mu.Lock()
	s.initLocked()
	s.mu.Unlock()
	l := &splitListener{Listener: ln, s: s, conns: make(chan net.Conn), closed: make(chan struct{})}
	go l.accept()
	return l
}

type splitListener struct {
	net.Listener
	s      *Server
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	err    error // Accept's error once the accept loop ended
}

// accept hands each accepted connection to sort, until ln fails.
func (l *splitListener) accept() {
	var delay time.Duration
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second) // as net/http: out of files, wait
				l.s.Log.Warn("h2c accept", zap.Error(err), zap.Duration("retry in", delay))
				time.Sleep(delay)
				continue
			}
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.close()
			return
		}
		delay = 0
		go l.sort(nc)
	}
}

// sort reads as much of the client preface as the connection's first
// bytes match: all of it goes to the HTTP/2 server, the rest to net/http.
func (l *splitListener) sort(nc net.Conn) {
	_ = nc.SetReadDeadline(time.Now().Add(l.s.ReadHeaderTimeout))
	var b [len(http2.ClientPreface)]byte
	n := 0
	for n < len(b) {
		k, err := nc.Read(b[n:])
		n += k
		if string(b[:n]) != http2.ClientPreface[:n] {
			break
		}
		if err != nil {
			_ = nc.Close() // nothing to serve: closed or too slow
			return
		}
	}
	if string(b[:n]) == http2.ClientPreface {
		_ = l.s.serveConn(nc, true)
		return
	}
	_ = nc.SetReadDeadline(time.Time{})
	select {
	case l.conns <- &peeked{Conn: nc, buf: append([]byte(nil), b[:n]...)}:
	case <-l.closed:
		_ = nc.Close()
	}
}

// Accept returns the next connection that is not HTTP/2.
func (l *splitListener) Accept() (net.Conn, error) {
	select {
	case nc := <-l.conns:
		return nc, nil
	case <-l.closed:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting, both kinds.
func (l *splitListener) Close() error {
	l.close()
	return l.Listener.Close() //nolint:wrapcheck // net/http looks at it as it is
}

func (l *splitListener) close() { l.once.Do(func() { close(l.closed) }) }

// peeked is a connection whose first bytes were read: they are read again
// first.
type peeked struct {
	net.Conn
	buf []byte
}

func (p *peeked) Read(b []byte) (int, error) {
	if len(p.buf) > 0 {
		n := copy(b, p.buf)
		p.buf = p.buf[n:]
		if len(p.buf) == 0 {
			p.buf = nil
		}
		return n, nil
	}
	return p.Conn.Read(b) //nolint:wrapcheck // a connection's errors, as they are
}

// SyscallConn is the socket's, for a hijacked stream's look at it.
func (p *peeked) SyscallConn() (syscall.RawConn, error) {
	sc, ok := p.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn() //nolint:wrapcheck // as the socket answers
}

// CloseWrite is the socket's.
func (p *peeked) CloseWrite() error {
	if cw, ok := p.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite() //nolint:wrapcheck // as the socket answers
	}
	return errors.ErrUnsupported
}
