package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/store/sitehealth"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Signals is where the site's health reports are kept (*sitehealth.Store).
type Signals interface {
	Put(ctx context.Context, item string, r *sitehealth.Report) error
}

// signal keeps one instance's health report of an item's site
// (POST /api/v1/items/:itemId/signal): the scheduler that steers the item
// reads it. The site authenticates with the install's signal token (a
// bearer, compared in constant time); the body is bounded
// (sitehealth.MaxBodyBytes) and checked before anything is stored.
func (s *Server) signal(c *gin.Context) {
	if s.opt.Signals == nil || s.opt.SignalToken == "" {
		httpserver.Abort(c, registration.Disabled("SIGNAL_DISABLED", "this install takes no site signal (WR_SIGNAL_TOKEN is not set)"))
		return
	}
	got := httpserver.Bearer(c.GetHeader("Authorization"))
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.opt.SignalToken)) != 1 {
		c.Header("WWW-Authenticate", `Bearer realm="waitroom-signal"`)
		httpserver.Abort(c, registration.Unauthorized("UNAUTHORIZED", "a valid signal bearer token is required"))
		return
	}
	item := c.Param("itemId")
	if p := topics.ItemIDProblem(item); p != "" {
		httpserver.Abort(c, registration.BadRequest("INVALID_ITEM_ID", p))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, sitehealth.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			httpserver.Abort(c, registration.BodyTooLarge(sitehealth.MaxBodyBytes))
			return
		}
		httpserver.Abort(c, registration.BadRequest("INVALID_BODY", "reading request body: "+err.Error()))
		return
	}
	var r sitehealth.Report
	if derr := httpserver.DecodeJSON(body, &r); derr != nil {
		httpserver.Abort(c, registration.BadRequest(derr.Code, derr.Message))
		return
	}
	if err := r.Validate(topics.ValidID); err != nil {
		httpserver.Abort(c, registration.BadRequest("INVALID_SIGNAL", err.Error()))
		return
	}
	r.At = s.now().UnixMilli()
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opt.StatusTimeout)
	defer cancel()
	switch err := s.opt.Signals.Put(ctx, item, &r); {
	case errors.Is(err, sitehealth.ErrTooManyInstances):
		httpserver.Abort(c, &registration.Error{Status: http.StatusTooManyRequests, Code: "TOO_MANY_INSTANCES", RetryAfter: 60,
			Message: "this item's signal already has the most instances reporting; an instance silent for 10 minutes is forgotten"})
		return
	case err != nil:
		s.log.Warn("keep a site signal", zap.String("item", item), zap.Error(err))
		httpserver.Abort(c, registration.Unavailable("the signal could not be kept; retry"))
		return
	}
	c.Status(http.StatusNoContent)
}
