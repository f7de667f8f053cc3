package sse

import (
	"context"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/view"
)

// SetView gates streams on a trusted Redis view: while it is empty, older
// than the record or being rebuilt, a stream request answers 503
// VIEW_REBUILDING with Retry-After instead of a position read from it, and
// open streams end (EventSource reconnects after its retry and is refused
// until the view is back). Call before serving.
func (s *Server) SetView(w *view.Watcher) {
	s.view = w
	c := make(chan struct{})
	s.lost.Store(&c)
}

// viewLost is closed when the view stops being trusted (nil: never).
func (s *Server) viewLost() <-chan struct{} {
	if c := s.lost.Load(); c != nil {
		return *c
	}
	return nil
}

// watchView ends the open streams when the view stops being trusted, until
// ctx ends.
func (s *Server) watchView(ctx context.Context) {
	if s.view == nil {
		return
	}
	t := time.NewTicker(s.view.Interval())
	defer t.Stop()
	closed := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, _ := s.view.Trusted()
		switch {
		case !ok && !closed:
			close(*s.lost.Load())
			closed = true
		case ok && closed:
			c := make(chan struct{})
			s.lost.Store(&c)
			closed = false
		}
	}
}

// gateView refuses a stream while the view is not trusted, and confirms the
// trusted generation is still the one in Redis right before the stream reads
// it (a Redis lost a moment ago is refused, not streamed from).
func (s *Server) gateView(c *gin.Context) {
	if view.Abort(c, s.view) {
		return
	}
	if err := s.view.Confirm(c.Request.Context()); err != nil {
		view.AbortWith(c, "the Redis view changed a moment ago: "+err.Error())
	}
}
