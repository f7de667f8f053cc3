package view

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
)

// Config is how a service watches the view.
type Config struct {
	// CheckInterval is the time between two checks of the marker.
	CheckInterval time.Duration `env:"WR_VIEW_CHECK_INTERVAL" envDefault:"250ms"`
}

// Code is the error code of every answer refused while the view is not trusted.
const Code = "VIEW_REBUILDING"

// RetryAfter is the Retry-After (seconds) of those answers.
const RetryAfter = 1

// Gate answers 503 VIEW_REBUILDING with Retry-After and why, when w does not
// trust the view, and reports whether it did (it aborted the handler chain).
// Handlers that read the view call it first; a nil Watcher never aborts.
func Gate(c *gin.Context, w *Watcher) bool {
	ok, reason := w.Trusted()
	if ok {
		return false
	}
	httpserver.Abort(c, Refusal(reason))
	return true
}

// Ready is a readiness condition (httpserver.Readiness.Require): not ready
// while the view is not trusted, saying why.
func (w *Watcher) Ready() (ok bool, code, reason string) {
	ok, reason = w.Trusted()
	return ok, Code, reason
}

// Refusal is the 503 VIEW_REBUILDING answer, with Retry-After and reason.
func Refusal(reason string) *registration.Error {
	return &registration.Error{Status: http.StatusServiceUnavailable, Code: Code, Message: reason, RetryAfter: RetryAfter}
}

// GateItem is Gate for an answer about item: it also answers 503
// VIEW_REBUILDING while item alone is lost (its node lost its keys), and
// only for item. A nil Watcher never aborts.
func GateItem(c *gin.Context, w *Watcher, item string) bool {
	ok, reason := w.Item(item)
	if ok {
		return false
	}
	httpserver.Abort(c, Refusal(reason))
	return true
}

// Detail is a readiness detail (httpserver.Readiness.Detail): the items
// being rebuilt, under "rebuilding", while there are any.
func (w *Watcher) Detail() (string, any) {
	r := w.Rebuilding()
	if len(r) == 0 {
		return "rebuilding", nil
	}
	return "rebuilding", r
}
