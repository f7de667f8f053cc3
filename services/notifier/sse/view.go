package sse

import (
	"context"
	"sync"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/foundation/retry"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
)

// SetView gates streams on a trusted Redis view: while it is empty, older
// than the record or being rebuilt, a stream request answers 503
// VIEW_REBUILDING with Retry-After instead of a position read from it, and
// open streams end (EventSource reconnects after its retry and is refused
// until the view is back). Call before serving.
func (s *Server) SetView(w *view.Watcher) {
	s.view = w
	s.lost.regain()
}

// ending is closed when the open streams must end: the view stopped being
// trusted, or the hub stopped. One channel for both: each channel a parked
// stream waits on holds a runtime record of ~100 bytes (BENCHMARKS: h2c memory).
func (s *Server) ending() <-chan struct{} { return s.lost.current() }

// lostView is the channel open streams watch: closed when the view is
// lost, replaced by an open one once it is trusted again. Both the watcher
// (at its interval) and the gate (on a request that found the view
// trusted, which may be sooner) may replace it, so a stream opened right
// after the view came back never watches the closed one. Once ended (the
// hub stopped) it stays closed.
type lostView struct {
	mu     sync.Mutex
	c      chan struct{}
	closed bool
	ended  bool
}

func (l *lostView) current() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c // nil before SetView: never closed
}

func (l *lostView) lose() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closeLocked()
}

// end closes the channel for good (made first if SetView never made it, so
// a stream that opens after the end still sees it closed).
func (l *lostView) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	if l.c == nil {
		l.c = make(chan struct{})
	}
	l.closeLocked()
}

// closeLocked closes the current channel once; l.mu is held.
func (l *lostView) closeLocked() {
	if l.c != nil && !l.closed {
		close(l.c)
		l.closed = true
	}
}

func (l *lostView) regain() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	if l.c == nil || l.closed {
		l.c, l.closed = make(chan struct{}), false
	}
}

// watchView ends the open streams when the view stops being trusted, until
// ctx ends.
func (s *Server) watchView(ctx context.Context) {
	if s.view == nil {
		return
	}
	retry.Every(ctx, s.view.Interval(), false, func(context.Context) error {
		if ok, _ := s.view.Trusted(); ok {
			s.lost.regain()
		} else {
			s.lost.lose()
		}
		return nil
	}, func(error, bool) {})
}

// gateView refuses a stream of item while the view is not trusted or the
// item is lost (its node lost its keys), and confirms the trusted generation
// and the item's marker are still the ones in Redis right before the stream
// reads it (a node lost a moment ago is refused, not streamed from); false:
// refused.
func (s *Server) gateView(c *gin.Context, item string) bool {
	if view.GateItem(c, s.view, item) {
		return false
	}
	ctx, cancel := s.readCtx(c.Request.Context())
	defer cancel()
	if err := s.view.ConfirmItem(ctx, item); err != nil {
		httpserver.Abort(c, view.Refusal("the Redis view changed a moment ago: "+err.Error()))
		return false
	}
	s.lost.regain() // trusted now: the watcher may not have seen it come back yet
	return true
}

// readCtx bounds an open's Redis read by the read timeout, not hung on the
// request's context ctx: on HTTP/2 that context lives as long as the stream,
// and would keep the map of its children (stream.gone). A client that leaves
// meanwhile waits out the read.
func (s *Server) readCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.opt.ReadTimeout)
}

// itemLost reports whether item's answers may no longer be read from the
// view (the view or the item lost): an open stream of it ends, and its
// client reconnects to be told VIEW_REBUILDING until the item is rebuilt.
func (s *Server) itemLost(item string) bool {
	ok, _ := s.view.Item(item)
	return !ok
}
