package httpapi

import (
	"context"
	"errors"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/security/assertion"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// proven checks a registration's assertion (pkg/security/assertion). Without one, the
// registration's userId stays a label (ok, claims zero) unless the api
// requires assertions. With one, its userId is the proven one: a different
// userId in the body is refused, not silently replaced. On a refusal it has
// answered (401, or 400 where assertions are off) and ok is false.
func (s *Server) proven(c *gin.Context, item string, req RegisterRequest) (assertion.Claims, bool) {
	v := s.opt.Guard.Assertions
	switch {
	case req.Assertion == "" && v.Required():
		httpserver.Abort(c, registration.Unauthorized("ASSERTION_REQUIRED", "this room admits only users the site vouches for: register through the site (its link carries an assertion)"))
		return assertion.Claims{}, false
	case req.Assertion == "":
		return assertion.Claims{}, true
	case v == nil:
		httpserver.Abort(c, registration.Disabled("ASSERTIONS_DISABLED", "this room trusts no assertions (WR_ASSERTION_ISSUER is not set); register without one"))
		return assertion.Claims{}, false
	}
	a, err := v.Verify(req.Assertion, item)
	switch {
	case errors.Is(err, assertion.ErrExpired):
		httpserver.Abort(c, registration.Unauthorized("ASSERTION_EXPIRED", "the assertion has expired; get a fresh link from the site"))
		return assertion.Claims{}, false
	case err != nil:
		httpserver.Abort(c, registration.Unauthorized("ASSERTION_INVALID", err.Error()))
		return assertion.Claims{}, false
	case req.UserID != "" && req.UserID != a.UserID:
		httpserver.Abort(c, registration.BadRequest("ASSERTION_USER_MISMATCH", "userId differs from the assertion's user; send the assertion alone"))
		return assertion.Claims{}, false
	}
	return a, true
}

// identify is who a registration is for: a typed userId is a label, so the
// place is keyed by the registration's own token (HolderToken) and no
// per-user bucket is kept for it (anyone typing the name could empty it); a
// userId an assertion proves keys the place (HolderUser) and has its bucket.
// On a refusal it has answered and ok is false.
func (s *Server) identify(c *gin.Context, item string, req RegisterRequest) (user, holder string, proof assertion.Claims, ok bool) {
	if proof, ok = s.proven(c, item, req); !ok {
		return "", "", proof, false
	}
	if proof.UserID == "" {
		return req.UserID, topics.HolderToken, proof, true
	}
	if ok, wait := s.opt.Throttle.Allow(c.Request.Context(), byUser, proof.UserID); !ok {
		httpserver.Abort(c, registration.RateLimited(byUser, wait))
		return "", "", proof, false
	}
	return proof.UserID, topics.HolderUser, proof, true
}

// spend marks a's jti used by the registration whose tokenId is place, so
// each assertion registers once; on a refusal it has answered (401
// ASSERTION_REUSED, or 503 when Redis cannot say). A registration that
// names itself (a requestId: place is derived from it) may send the
// assertion again, as a retry whose answer was lost does: it names the same
// place, so it is the same use (tokenIDFor). place "" (no requestId): never.
func (s *Server) spend(ctx context.Context, c *gin.Context, a assertion.Claims, place string) bool {
	first, err := s.opt.Guard.Spent.MarkFor(ctx, s.opt.Guard.Assertions.SpentKey(a), place, a.ExpiresAt)
	if err != nil {
		s.log.Warn("mark assertion used", zap.Error(err))
		httpserver.Abort(c, registration.Unavailable("the assertion cannot be checked right now; retry shortly"))
		return false
	}
	if !first {
		httpserver.Abort(c, registration.Unauthorized("ASSERTION_REUSED", "this assertion was used before; each registers once: get a fresh link from the site"))
		return false
	}
	return true
}
