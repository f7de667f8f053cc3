package sse

import (
	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/view"
)

// SetView gates new streams on a trusted Redis view: while it is empty, older
// than the record or being rebuilt, a stream request answers 503
// VIEW_REBUILDING with Retry-After instead of a position read from it. Call
// before serving.
func (s *Server) SetView(w *view.Watcher) { s.view = w }

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
