package httpapi

import (
	"context"
	"crypto/ed25519"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/security/assertion"
	"github.com/waitroom/waitroom/pkg/security/bypass"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/api/pow"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Guard is what a registration may have to show besides the throttles: the
// proof-of-work of an item that asks for one, or an operator's bypass code.
type Guard struct {
	// Pow issues and verifies challenges; Spent refuses a challenge used twice.
	Pow   *pow.Issuer
	Spent *pow.Spent
	// BypassKey verifies bypass codes (nil: codes are refused BYPASS_DISABLED);
	// Uses reads how many registrations a code placed.
	BypassKey ed25519.PublicKey
	Uses      interface {
		BypassUses(ctx context.Context, item, id string) (int64, error)
	}
	// Assertions verifies site-signed user assertions (nil: none trusted;
	// Spent then also remembers each assertion's jti until it expires).
	Assertions *assertion.Verifier
}

// ChallengeResponse is a proof-of-work challenge (GET .../challenge, and the
// body of POW_REQUIRED).
type ChallengeResponse struct {
	Challenge  string `json:"challenge"`
	Difficulty int    `json:"difficulty"`
	ExpiresAt  string `json:"expiresAt"`
}

// powRequired is the POW_REQUIRED answer: the error and a fresh challenge.
type powRequired struct {
	httpserver.ErrorBody
	Pow ChallengeResponse `json:"pow"`
}

func (s *Server) challengeOf(item string, difficulty int) ChallengeResponse {
	ch := s.opt.Guard.Pow.Issue(item, difficulty)
	return ChallengeResponse{Challenge: ch.Raw, Difficulty: difficulty, ExpiresAt: ch.ExpiresAt.UTC().Format(time.RFC3339Nano)}
}

// challenge answers GET /api/v1/items/:itemId/challenge: a challenge at the
// item's difficulty (difficulty 0, no challenge, when the item asks none).
func (s *Server) challenge(c *gin.Context) {
	item := c.Param("itemId")
	if err := registration.CheckItemID(item); err != nil {
		httpserver.Abort(c, err)
		return
	}
	st, ok := s.items.Get(item)
	if !ok {
		httpserver.Abort(c, registration.Decide(item, st, ok))
		return
	}
	c.Header("Cache-Control", "no-store")
	if st.PowDifficulty <= 0 || s.opt.Guard.Pow == nil {
		c.JSON(http.StatusOK, ChallengeResponse{})
		return
	}
	c.JSON(http.StatusOK, s.challengeOf(item, st.PowDifficulty))
}

func guardErr(status int, code, message string) *registration.Error {
	return &registration.Error{Status: status, Code: code, Message: message}
}

// guard checks what req must show for item (state st) and returns the
// bypass use the record carries (nil without a code); on a refusal it has
// answered and returns false. A bypass code stands in for the proof-of-work.
func (s *Server) guard(c *gin.Context, item string, st topics.ItemState, req RegisterRequest) (*topics.BypassUse, bool) {
	g := s.opt.Guard
	if req.Bypass != "" {
		if g.BypassKey == nil {
			s.m.guard.WithLabelValues("bypass", "disabled").Inc()
			httpserver.Abort(c, guardErr(http.StatusConflict, "BYPASS_DISABLED", "this room takes no bypass codes"))
			return nil, false
		}
		code, err := bypass.Verify(g.BypassKey, item, req.Bypass, s.now())
		var be *bypass.Error
		if errors.As(err, &be) {
			s.m.guard.WithLabelValues("bypass", be.Reason).Inc()
			httpserver.Abort(c, guardErr(http.StatusForbidden, "BYPASS_INVALID", be.Error()))
			return nil, false
		}
		ctx, cancel := context.WithTimeout(c.Request.Context(), s.opt.StatusTimeout)
		defer cancel()
		used, err := g.Uses.BypassUses(ctx, item, code.ID)
		if err != nil {
			s.log.Warn("read bypass uses", zap.String("item", item), zap.Error(err))
			httpserver.Abort(c, registration.Unavailable("the bypass code cannot be checked right now; retry shortly"))
			return nil, false
		}
		if used >= code.Count {
			s.m.guard.WithLabelValues("bypass", "exhausted").Inc()
			httpserver.Abort(c, guardErr(http.StatusForbidden, "BYPASS_EXHAUSTED", "the bypass code was used its "+strconv.FormatInt(code.Count, 10)+" times"))
			return nil, false
		}
		s.m.guard.WithLabelValues("bypass", "ok").Inc()
		return code.Use(), true
	}
	if st.PowDifficulty <= 0 || g.Pow == nil {
		return nil, true
	}
	if req.Pow == nil {
		s.m.guard.WithLabelValues("pow", "required").Inc()
		c.AbortWithStatusJSON(http.StatusForbidden, powRequired{
			ErrorBody: httpserver.ErrorBody{Error: httpserver.ErrorDetail{Code: "POW_REQUIRED",
				Message: "this item asks a proof-of-work: solve the challenge in \"pow\" and send {\"pow\":{\"challenge\",\"solution\"}}"}},
			Pow: s.challengeOf(item, st.PowDifficulty)})
		return nil, false
	}
	ch, err := g.Pow.Verify(item, st.PowDifficulty, req.Pow.Challenge, req.Pow.Solution)
	var pe *pow.Error
	if errors.As(err, &pe) {
		s.m.guard.WithLabelValues("pow", pe.Reason).Inc()
		httpserver.Abort(c, guardErr(http.StatusForbidden, "POW_INVALID", pe.Error()))
		return nil, false
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opt.StatusTimeout)
	defer cancel()
	first, err := g.Spent.Use(ctx, ch)
	if err != nil {
		s.log.Warn("mark challenge used", zap.String("item", item), zap.Error(err))
		httpserver.Abort(c, registration.Unavailable("the proof-of-work cannot be checked right now; retry shortly"))
		return nil, false
	}
	if !first {
		s.m.guard.WithLabelValues("pow", "reused").Inc()
		httpserver.Abort(c, guardErr(http.StatusConflict, "POW_REUSED", "this challenge was used already; get a new one"))
		return nil, false
	}
	s.m.guard.WithLabelValues("pow", "ok").Inc()
	return nil, true
}

func newGuardMetric(reg prometheus.Registerer) *prometheus.CounterVec {
	m := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "waitroom_api_guard_total",
		Help: "Proof-of-work and bypass-code checks of registrations, by check (pow, bypass) and outcome (ok or the refusal's reason)."},
		[]string{"check", "outcome"})
	reg.MustRegister(m)
	return m
}
