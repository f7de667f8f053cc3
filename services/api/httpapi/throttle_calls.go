package httpapi

import (
	"fmt"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
)

// limitCalls is the middleware of the calls besides registering that carry
// no queue token (challenge): a call past its client address's buckets
// (call-ip, call-ip48) is refused 429 RATE_LIMITED before any work.
func (s *Server) limitCalls(c *gin.Context) {
	s.limitAddr(c)
}

// limitAddr takes one token from the client address's call buckets, when
// they are on (the address is not even read otherwise); past them, it has
// answered 429 RATE_LIMITED and returns false.
func (s *Server) limitAddr(c *gin.Context) bool {
	if !s.opt.Throttle.addrOn(byCallIP, byCallIP48) {
		return true
	}
	if ok, by, wait := s.opt.Throttle.AllowAddr(c.Request.Context(), byCallIP, byCallIP48, c.ClientIP()); !ok {
		httpserver.Abort(c, callLimited(by, wait))
		return false
	}
	return true
}

// tokenCall is the route of a call that carries a queue token (status,
// leave): the address's buckets, then the token, parsed once here and handed
// to h, then, for a valid token, its bucket of kind, then gate (when not
// nil), then h. A call whose token is invalid passes the token's bucket on to
// h, which refuses it: a made-up token must not drain a real one's bucket.
// One handler rather than a middleware chain, so the parsed token needs no
// gin.Context key (a map made per request).
func (s *Server) tokenCall(kind string, gate gin.HandlerFunc, h func(*gin.Context, parsedQueue)) gin.HandlerFunc {
	return func(c *gin.Context) {
		if !s.limitAddr(c) {
			return
		}
		q, slot, err := registration.AuthorizeQueueSlot(s.signer, c.Param("itemId"), httpserver.QueueTokenOf(c.Request, c.Param("token")))
		look := posLook{slot: slot}
		if err == nil && s.opt.Throttle != nil {
			var ok bool
			if ok, look = s.allowTokenCall(c, kind, q, slot); !ok {
				return
			}
		}
		if gate != nil {
			if gate(c); c.IsAborted() {
				return
			}
		}
		h(c, parsedQueue{q: q, err: err, look: look})
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

// allowTokenCall takes one token from q's bucket of kind; past it, it has
// answered 429 RATE_LIMITED and returns false. A status bucket kept in the
// token's record (positions.useBucket) hands back, from the same look-up,
// the token's remembered read for the handler (slot: the token's, see
// positions.takeStatus).
func (s *Server) allowTokenCall(c *gin.Context, kind string, q token.Queue, slot *token.Slot) (bool, posLook) {
	var (
		ok   bool
		wait time.Duration
		look = posLook{slot: slot}
	)
	if kind == byStatus && s.pos != nil && s.pos.bucket != nil && q.TokenID != "" {
		if ok, wait, look = s.pos.takeStatus(q.ItemID, q.TokenID, slot); !ok {
			s.opt.Throttle.refused(kind)
		}
	} else {
		ok, wait = s.opt.Throttle.Allow(c.Request.Context(), kind, q.TokenID)
	}
	if !ok {
		httpserver.Abort(c, callLimited(kind, wait))
	}
	return ok, look
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

// parsedQueue is a request's queue token, verified for the item of its
// path, or why it is refused.
type parsedQueue struct {
	q   token.Queue
	err error
	// look is the token's remembered read, found with its status bucket.
	look posLook
}
