package httpapi

import (
	"fmt"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
)

// limitCalls is the middleware of the calls besides registering: a call
// past its client address's buckets (call-ip, call-ip48) is refused 429
// RATE_LIMITED before any work, then, when kind names a per-token bucket
// (status, leave), a call with a valid queue token past that token's bucket.
// A call whose token is invalid passes on: the handler refuses it, and a
// made-up token must not drain a real one's bucket.
func (s *Server) limitCalls(kind string) gin.HandlerFunc {
	return func(c *gin.Context) {
		if s.opt.Throttle == nil {
			return
		}
		if ok, by, wait := s.opt.Throttle.AllowAddr(c.Request.Context(), byCallIP, byCallIP48, c.ClientIP()); !ok {
			httpserver.Abort(c, callLimited(by, wait))
			return
		}
		if kind == "" {
			return
		}
		q, err := s.queueToken(c)
		if err != nil {
			return
		}
		s.allowToken(c, kind, q.TokenID)
	}
}

// allowToken takes one token from tokenID's bucket of kind; past it, it has
// answered 429 RATE_LIMITED and returns false.
func (s *Server) allowToken(c *gin.Context, kind, tokenID string) bool {
	if ok, wait := s.opt.Throttle.Allow(c.Request.Context(), kind, tokenID); !ok {
		httpserver.Abort(c, callLimited(kind, wait))
		return false
	}
	return true
}

// callLimited is RATE_LIMITED (as registration.RateLimited: the same code,
// status and Retry-After) for a call other than a registration, naming the
// bucket that is empty.
func callLimited(by string, wait time.Duration) *registration.Error {
	e := registration.RateLimited(by, wait)
	who := "this address"
	switch by {
	case byStatus:
		who = "this token (status reads)"
	case byLeave:
		who = "this token (leaves)"
	case byAdmission:
		who = "this admission token"
	}
	e.Message = fmt.Sprintf("too many calls from %s; retry in %d s", who, e.RetryAfter)
	return e
}

// queueToken is the request's queue token, verified for the item of its
// path, parsed once per request (the middleware and the handler share it).
func (s *Server) queueToken(c *gin.Context) (token.Queue, error) {
	if v, ok := c.Get(queueTokenKey); ok {
		r := v.(parsedQueue)
		return r.q, r.err
	}
	q, err := registration.AuthorizeQueue(s.signer, c.Param("itemId"), httpserver.QueueTokenOf(c.Request, c.Param("token")))
	c.Set(queueTokenKey, parsedQueue{q, err})
	return q, err
}

const queueTokenKey = "waitroom.queueToken"

type parsedQueue struct {
	q   token.Queue
	err error
}
