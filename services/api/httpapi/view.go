package httpapi

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
)

// gateView answers 503 VIEW_REBUILDING (with Retry-After) on the routes that
// read the line while the Redis view is not trusted; registrations and leaves
// go to Kafka, the record, and are still accepted.
func (s *Server) gateView(c *gin.Context) {
	if view.Gate(c, s.opt.View) {
		s.m.viewRefused.Inc()
	}
}

// gateItem is gateView for the routes of one item (:itemId): it also
// answers 503 VIEW_REBUILDING while that item alone is lost (its Redis node
// lost its keys) and until it is rebuilt; other items are answered.
func (s *Server) gateItem(c *gin.Context) {
	if view.GateItem(c, s.opt.View, c.Param("itemId")) {
		s.m.viewRefused.Inc()
	}
}

// refuseView answers 503 VIEW_REBUILDING when err says the read was not
// confirmed against the view (the item's node or the whole view lost a
// moment ago, before the watcher's next check), and reports whether it did.
func (s *Server) refuseView(c *gin.Context, item string, err error) bool {
	if !errors.Is(err, view.ErrNotTrusted) {
		return false
	}
	s.m.viewRefused.Inc()
	_, why := s.opt.View.Item(item)
	httpserver.Abort(c, view.Refusal(cmp.Or(why, "the Redis view changed a moment ago: it is being checked")))
	return true
}

// viewLine confirms after every read of the line that the view read was the
// trusted one and the item's own node still holds its line, so a read racing a lost Redis or a rebuild is refused (503)
// rather than answered wrong.
type viewLine struct {
	Line
	w *view.Watcher
}

// ConfirmedLine wraps line so that every read is confirmed against w.
func ConfirmedLine(line Line, w *view.Watcher) Line {
	if w == nil {
		return line
	}
	return viewLine{Line: line, w: w}
}

func (l viewLine) Status(ctx context.Context, item, key, tokenID string, partition int32, offset int64) (line.Status, error) {
	st, err := l.Line.Status(ctx, item, key, tokenID, partition, offset)
	if err != nil {
		return st, err
	}
	return st, l.w.ConfirmItem(ctx, item)
}

func (l viewLine) HeldUntil(ctx context.Context, item, tokenID string) (time.Time, bool, error) {
	t, ok, err := l.Line.HeldUntil(ctx, item, tokenID)
	if err != nil {
		return t, ok, err
	}
	return t, ok, l.w.ConfirmItem(ctx, item)
}

func (l viewLine) Complete(ctx context.Context, item, tokenID, key string) (bool, error) {
	if err := l.w.Touch(ctx); err != nil {
		return false, err
	}
	ok, err := l.Line.Complete(ctx, item, tokenID, key)
	if err != nil {
		return ok, err
	}
	return ok, l.w.ConfirmItem(ctx, item)
}

func (l viewLine) Motion(ctx context.Context, item string) (line.Motion, error) {
	m, err := l.Line.Motion(ctx, item)
	if err != nil {
		return m, err
	}
	return m, l.w.ConfirmItem(ctx, item)
}
