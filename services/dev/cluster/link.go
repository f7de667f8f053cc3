package cluster

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Link is a TCP link between two processes that the chaos suite can spoil,
// in the spirit of Shopify's toxiproxy but small enough to listen inside a
// network namespace: it carries every byte both ways, and on demand
//   - delays each chunk by a latency with jitter (Toxics.Latency, Jitter),
//   - squeezes the bandwidth (Toxics.Rate bytes per second each way),
//   - holds everything: connections are accepted, nothing is answered, and
//     what was sent is delivered late on Heal (a partition, or a pause, as
//     TCP sees it: the peer just stops answering) — or dropped by a Reset
//     before the Heal (toxiproxy's timeout toxic),
//   - resets every connection (RST, reset_peer),
//   - cuts: every connection reset and new ones reset at once, until Heal,
//   - holds one direction only (HoldOneWay: an asymmetric partition; a
//     request reaches the server and its answer never comes back),
//   - loses packets, as TCP shows a loss to the programs above it
//     (Toxics.Loss): a link cannot drop bytes from a stream without
//     breaking it, and TCP never does, so a lost segment is what TCP makes
//     of it, its retransmission: the chunk and everything behind it waits
//     a retransmission timeout (200 ms, Linux's least, doubling with each
//     loss in a row, up to 3.2 s). Nothing is reordered or corrupted.
type Link struct {
	Name string
	ln   net.Listener
	dial func(ctx context.Context) (net.Conn, error)

	mu   sync.Mutex
	tox  Toxics
	mode linkMode
	wake chan struct{} // closed when the link leaves mode held
	// oneWay is the direction held (HoldOneWay); none: both flow
	oneWay Direction
	wakeOW chan struct{} // closed when oneWay is lifted
	conns  map[*pipe]struct{}
	wg     sync.WaitGroup
}

// Toxics spoil the bytes a Link carries; the zero value spoils nothing.
type Toxics struct {
	Latency time.Duration // added to every chunk, each way
	Jitter  time.Duration // ± uniformly around Latency (never below zero)
	Rate    int           // bytes per second each way; 0: unlimited
	// Loss is the chance that a chunk is lost once on its way, each way:
	// it and what follows wait a retransmission timeout (see Link).
	Loss float64
}

// Direction is one way through a link.
type Direction int

const (
	// Both directions (no direction held).
	Both Direction = iota
	// Up is from the client to the target: requests.
	Up
	// Down is from the target to the client: answers.
	Down
)

func (d Direction) String() string {
	switch d {
	case Up:
		return "up"
	case Down:
		return "down"
	}
	return "both"
}

type linkMode int

const (
	linkOpen linkMode = iota
	linkHeld
	linkCut
)

// NewProxy listens on addr (this process's network namespace) and links
// every connection to target.
func NewProxy(addr, target string) (*Link, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return NewLink(addr, ln, func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", target)
	}), nil
}

// NewLink links every connection accepted on ln to a connection made by dial.
func NewLink(name string, ln net.Listener, dial func(ctx context.Context) (net.Conn, error)) *Link {
	l := &Link{Name: name, ln: ln, dial: dial, wake: make(chan struct{}), wakeOW: make(chan struct{}), conns: map[*pipe]struct{}{}}
	close(l.wake)
	close(l.wakeOW)
	l.wg.Add(1)
	go l.accept()
	return l
}

// Addr is where the link listens.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Set replaces the link's toxics (the zero Toxics: none).
func (l *Link) Set(t Toxics) {
	l.mu.Lock()
	l.tox = t
	l.mu.Unlock()
}

// Hold stops the link answering until Heal: connections are accepted and
// written to, nothing goes through either way.
func (l *Link) Hold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mode != linkHeld {
		l.mode, l.wake = linkHeld, make(chan struct{})
	}
}

// HoldOneWay stops one direction (Up or Down) until Heal, an asymmetric
// partition: on open connections the other direction flows, so a request
// reaches the server and its answer is held (Down), or answers flow while
// requests are held (Up). New connections wait until Heal, as a handshake
// cannot complete one way. What was held is delivered on Heal, as TCP
// retransmits it once the path is back.
func (l *Link) HoldOneWay(d Direction) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d == Both {
		return
	}
	if l.oneWay == Both {
		l.wakeOW = make(chan struct{})
	}
	l.oneWay = d
}

// Cut resets every connection through the link and resets new ones at once
// until Heal.
func (l *Link) Cut() {
	l.mu.Lock()
	l.open()
	l.mode = linkCut
	l.mu.Unlock()
	l.Reset()
}

// Heal lifts Hold and Cut (what a Hold kept is delivered now) and every toxic.
func (l *Link) Heal() {
	l.mu.Lock()
	l.open()
	l.tox = Toxics{}
	l.mu.Unlock()
}

// open leaves mode held and a one-way hold (waking what waits) for mode
// open; l.mu is held.
func (l *Link) open() {
	if l.mode == linkHeld {
		close(l.wake)
	}
	if l.oneWay != Both {
		close(l.wakeOW)
	}
	l.mode, l.oneWay = linkOpen, Both
}

// Reset ends every connection through the link with a TCP reset on both
// sides, as a crashed peer or a middlebox would; new ones go through.
func (l *Link) Reset() {
	l.mu.Lock()
	ps := make([]*pipe, 0, len(l.conns))
	for p := range l.conns {
		ps = append(ps, p)
	}
	l.mu.Unlock()
	for _, p := range ps {
		p.reset()
	}
}

// Close stops the link and resets what it carries.
func (l *Link) Close() error {
	err := l.ln.Close()
	l.Heal()
	l.Reset()
	l.wg.Wait()
	return err
}

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		l.wg.Add(1)
		go l.serve(c)
	}
}

// state is the link's mode, toxics and wake channel now.
func (l *Link) state() (linkMode, Toxics, chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mode, l.tox, l.wake
}

// held reports whether direction d is held now (by Hold, or by HoldOneWay
// of d, or of either direction when d is Both: a new connection) and the
// channel closed when that ends.
func (l *Link) held(d Direction) (bool, chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mode == linkHeld {
		return true, l.wake
	}
	if l.oneWay != Both && (d == Both || d == l.oneWay) {
		return true, l.wakeOW
	}
	return false, nil
}

func (l *Link) serve(c net.Conn) {
	defer l.wg.Done()
	p := &pipe{a: c, done: make(chan struct{})}
	l.mu.Lock()
	cut := l.mode == linkCut
	if !cut {
		l.conns[p] = struct{}{}
	}
	l.mu.Unlock()
	if cut {
		resetConn(c)
		return
	}
	defer func() {
		l.mu.Lock()
		delete(l.conns, p)
		l.mu.Unlock()
		p.close()
	}()
	// A held link has accepted, but does not reach the other side yet: the
	// client's connect succeeded and its first request goes unanswered.
	if !l.waitOpen(p.done, Both) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	up, err := l.dial(ctx)
	cancel()
	if err != nil {
		return
	}
	if !p.setB(up) {
		up.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.copy(p, up, c, Up) }()
	go func() { defer wg.Done(); l.copy(p, c, up, Down) }()
	wg.Wait()
}

// waitOpen waits while direction d of the link is held; false when done
// closed first.
func (l *Link) waitOpen(done <-chan struct{}, d Direction) bool {
	for {
		held, wake := l.held(d)
		if !held {
			return true
		}
		select {
		case <-wake:
		case <-done:
			return false
		}
	}
}

type chunk struct {
	b  []byte
	at time.Time
}

// copy carries src to dst, one chunk at a time, through the toxics: a
// reader stamps each chunk with its arrival, a writer delivers it no sooner
// than arrival plus latency, no faster than the rate, and not while held.
// The channel between them is small, so a stalled writer stalls the reader
// and TCP's own flow control holds the sender back.
func (l *Link) copy(p *pipe, dst, src net.Conn, d Direction) {
	defer p.close()
	ch := make(chan chunk, 16)
	go func() {
		defer close(ch)
		for {
			b := make([]byte, 16<<10)
			n, err := src.Read(b)
			if n > 0 {
				select {
				case ch <- chunk{b[:n], time.Now()}:
				case <-p.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	var last time.Time
	for c := range ch {
		if !l.waitOpen(p.done, d) {
			return
		}
		_, tox, _ := l.state()
		// A lost segment waits TCP's retransmission timeout: 200 ms,
		// doubled each time the retransmission is lost too, at most 3.2 s.
		for rto := 200 * time.Millisecond; tox.Loss > 0 && rto <= 3200*time.Millisecond && rand.Float64() < tox.Loss; rto *= 2 {
			if !sleepUntil(time.Now().Add(rto), p.done) {
				return
			}
		}
		if tox.Latency > 0 || tox.Jitter > 0 {
			lat := tox.Latency
			if tox.Jitter > 0 {
				lat += time.Duration(rand.Int64N(int64(2*tox.Jitter+1))) - tox.Jitter
			}
			at := c.at.Add(max(lat, 0))
			if at.Before(last) {
				at = last // jitter never reorders a byte stream
			}
			last = at
			if !sleepUntil(at, p.done) {
				return
			}
		}
		for b := c.b; len(b) > 0; {
			n := len(b)
			if tox.Rate > 0 {
				n = min(n, max(tox.Rate/10, 1)) // a tenth of a second's worth at a time
			}
			if _, err := dst.Write(b[:n]); err != nil {
				return
			}
			b = b[n:]
			if tox.Rate > 0 && !sleepUntil(time.Now().Add(time.Duration(n)*time.Second/time.Duration(tox.Rate)), p.done) {
				return
			}
		}
	}
}

func sleepUntil(t time.Time, done <-chan struct{}) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-done:
		return false
	}
}

// pipe is one connection through a link: a from the client, b to the target.
type pipe struct {
	mu   sync.Mutex
	a, b net.Conn
	once sync.Once
	done chan struct{}
}

func (p *pipe) setB(b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
		p.b = b
		return true
	}
}

func (p *pipe) close() {
	p.once.Do(func() {
		p.mu.Lock()
		close(p.done)
		b := p.b
		p.mu.Unlock()
		p.a.Close()
		if b != nil {
			b.Close()
		}
	})
}

func (p *pipe) reset() {
	p.mu.Lock()
	a, b := p.a, p.b
	p.mu.Unlock()
	resetConn(a)
	if b != nil {
		resetConn(b)
	}
	p.close()
}

// resetConn closes c with a TCP reset instead of a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
