package view

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/httpserver"
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

// Abort answers 503 VIEW_REBUILDING with Retry-After and why, when w does not
// trust the view, and reports whether it did. Handlers that read the view call
// it first; a nil Watcher never aborts.
func Abort(c *gin.Context, w *Watcher) bool {
	ok, reason := w.Trusted()
	if ok {
		return false
	}
	c.Header("Retry-After", strconv.Itoa(RetryAfter))
	httpserver.Abort(c, http.StatusServiceUnavailable, Code, reason)
	return true
}

// Ready is a readiness condition (httpserver.Readiness.Require): not ready
// while the view is not trusted, saying why.
func (w *Watcher) Ready() (ok bool, code, reason string) {
	ok, reason = w.Trusted()
	return ok, Code, reason
}

// AbortWith answers 503 VIEW_REBUILDING with Retry-After and reason.
func AbortWith(c *gin.Context, reason string) {
	c.Header("Retry-After", strconv.Itoa(RetryAfter))
	httpserver.Abort(c, http.StatusServiceUnavailable, Code, reason)
}

// AbortItem is Abort for an answer about item: it also answers 503
// VIEW_REBUILDING while item alone is lost (its node lost its keys), and
// only for item. A nil Watcher never aborts.
func AbortItem(c *gin.Context, w *Watcher, item string) bool {
	ok, reason := w.Item(item)
	if ok {
		return false
	}
	AbortWith(c, reason)
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
