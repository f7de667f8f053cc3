package sse

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"golang.org/x/time/rate"
)

// Why a stream was refused before it opened (the reason label of
// waitroom_notifier_streams_refused_total).
const (
	refusedToken    = "token"
	refusedAddress  = "address"
	refusedNotifier = "notifier"
	refusedOpenRate = "open_rate"
)

var refusedReasons = []string{refusedToken, refusedAddress, refusedNotifier, refusedOpenRate}

// Error codes of a refused stream.
const (
	// CodeTooManyStreams (429): the token, or the client's address, holds
	// its cap of open streams.
	CodeTooManyStreams = "TOO_MANY_STREAMS"
	// CodeNotifierFull (503): this notifier holds its cap of open streams.
	CodeNotifierFull = "NOTIFIER_FULL"
	// CodeNotifierBusy (503): streams open faster than the notifier's
	// budget of connect reads.
	CodeNotifierBusy = "NOTIFIER_BUSY"
)

// streamCaps counts the streams open (or opening) per token, per client
// address and in all, and refuses one past a cap. A stream takes its slot
// under one lock and gives it back once, however it ends, so the counts are
// exact.
type streamCaps struct {
	perToken, perAddr, total int // <= 0: no cap

	mu     sync.Mutex
	tokens map[string]int
	addrs  map[netip.Prefix]int
	open   int
}

func newStreamCaps(perToken, perAddr, total int) *streamCaps {
	return &streamCaps{perToken: perToken, perAddr: perAddr, total: total,
		tokens: map[string]int{}, addrs: map[netip.Prefix]int{}}
}

// slot is one stream's place in the counts; release gives it back (once;
// later calls do nothing).
type slot struct {
	c     *streamCaps
	token string
	addr  netip.Prefix // invalid: the address is not counted
	held  bool
}

// take counts a stream of token (a tokenId) from addr (an invalid prefix:
// not counted per address), or names the cap it is over (refusedToken,
// refusedAddress, refusedNotifier), checked in that order.
func (c *streamCaps) take(token string, addr netip.Prefix) (slot, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.perToken > 0 && c.tokens[token] >= c.perToken:
		return slot{}, refusedToken
	case c.perAddr > 0 && addr.IsValid() && c.addrs[addr] >= c.perAddr:
		return slot{}, refusedAddress
	case c.total > 0 && c.open >= c.total:
		return slot{}, refusedNotifier
	}
	c.tokens[token]++
	if addr.IsValid() {
		c.addrs[addr]++
	}
	c.open++
	return slot{c: c, token: token, addr: addr, held: true}, ""
}

// hand moves the slot to a new owner (a stream's own goroutine): s gives
// back nothing after it.
func (s *slot) hand() slot {
	h := *s
	s.held = false
	return h
}

func (s *slot) release() {
	if !s.held {
		return
	}
	s.held = false
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tokens[s.token]--; c.tokens[s.token] <= 0 {
		delete(c.tokens, s.token)
	}
	if s.addr.IsValid() {
		if c.addrs[s.addr]--; c.addrs[s.addr] <= 0 {
			delete(c.addrs, s.addr)
		}
	}
	c.open--
}

// counts returns the open slots and how many tokens and addresses hold one.
func (c *streamCaps) counts() (open, tokens, addrs int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open, len(c.tokens), len(c.addrs)
}

// addressKey is what the per-address cap counts a client by: its IPv4
// address, or the /64 of its IPv6 address (one subscriber's network). The
// host itself (loopback: a local proxy, a load test) and an address that
// does not parse are not counted.
func addressKey(ip string) netip.Prefix {
	if a, err := netip.ParseAddr(ip); err != nil || a.Unmap().IsLoopback() {
		return netip.Prefix{}
	}
	p, _, _ := httpserver.ClientPrefixes(ip)
	return p
}

// refusal is the answer to a stream refused by the cap named reason.
func refusal(reason string, limit int, retryAfter time.Duration) *registration.Error {
	secs := max(1, int(math.Ceil(retryAfter.Seconds())))
	e := &registration.Error{Status: http.StatusTooManyRequests, Code: CodeTooManyStreams, RetryAfter: secs}
	switch reason {
	case refusedToken:
		e.Message = fmt.Sprintf("this token already has %d streams open (another tab?); close one, or retry in %d s", limit, secs)
	case refusedAddress:
		e.Message = fmt.Sprintf("this address already has %d streams open; retry in %d s", limit, secs)
	case refusedNotifier:
		e.Status, e.Code = http.StatusServiceUnavailable, CodeNotifierFull
		e.Message = fmt.Sprintf("this notifier holds its %d streams; reconnect in %d s (maybe to another replica)", limit, secs)
	default: // refusedOpenRate
		e.Status, e.Code = http.StatusServiceUnavailable, CodeNotifierBusy
		e.Message = fmt.Sprintf("streams are opening faster than this notifier reads them (%d a second); retry in %d s", limit, secs)
	}
	return e
}

// openGate paces the Redis reads a stream makes when it opens (the view's
// confirmation and the status): a token bucket of rate a second with a
// second's burst. An open that finds the budget spent waits its turn when
// that comes within wait (and before the request ends), and is refused at
// once otherwise, so waiting opens stay few and short.
type openGate struct {
	lim  *rate.Limiter // nil: no cap
	wait time.Duration // negative: never wait
	now  func() time.Time
}

func newOpenGate(perSecond int, wait time.Duration) *openGate {
	g := &openGate{wait: wait, now: time.Now}
	if perSecond > 0 {
		g.lim = rate.NewLimiter(rate.Limit(perSecond), perSecond)
	}
	return g
}

// pass returns once the open may read, or how long until it could when
// that is further than the gate waits (ok false). ctx ending while it
// waits gives its turn back and returns ctx's error.
func (g *openGate) pass(ctx context.Context) (after time.Duration, ok bool, err error) {
	if g.lim == nil {
		return 0, true, nil
	}
	now := g.now()
	r := g.lim.ReserveN(now, 1)
	if !r.OK() {
		return time.Second, false, nil
	}
	d := r.DelayFrom(now)
	if d == 0 {
		return 0, true, nil
	}
	if d > g.wait {
		r.CancelAt(now)
		return d, false, nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return 0, true, nil
	case <-ctx.Done():
		r.CancelAt(g.now())
		return 0, false, fmt.Errorf("wait to open a stream: %w", ctx.Err())
	}
}
