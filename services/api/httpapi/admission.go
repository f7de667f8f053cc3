package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// AdmissionRequest is the body of verify and complete: the admission token
// (or an Authorization bearer) and the item the caller sells, required so a
// token of another item is refused rather than honoured.
type AdmissionRequest struct {
	Token  string `json:"token"`
	ItemID string `json:"itemId"`
}

// AdmissionResponse says an admission is live, for whom and until when.
type AdmissionResponse struct {
	Valid     bool   `json:"valid"`
	Status    string `json:"status"`
	ItemID    string `json:"itemId"`
	UserID    string `json:"userId"`
	TokenID   string `json:"tokenId"`
	ExpiresAt string `json:"expiresAt,omitempty"` // while valid
}

// ErrItemIDMissing refuses a verify or complete without "itemId" (400
// ITEM_ID_MISSING): a seller that does not say what it sells would honour an
// admission to any item.
var ErrItemIDMissing = registration.BadRequest("ITEM_ID_MISSING", `field "itemId" is required: the item the admission must be for`)

// admission reads and checks the admission token of a verify or complete
// call; on failure it has answered and returns false.
func (s *Server) admission(c *gin.Context) (token.Admission, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, s.opt.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			httpserver.Abort(c, registration.BodyTooLarge(s.opt.MaxBodyBytes))
			return token.Admission{}, false
		}
		httpserver.Abort(c, registration.BadRequest("INVALID_BODY", "reading request body: "+err.Error()))
		return token.Admission{}, false
	}
	var req AdmissionRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		if e := httpserver.DecodeJSON(body, &req); e != nil {
			httpserver.Abort(c, registration.BadRequest(e.Code, e.Message))
			return token.Admission{}, false
		}
	}
	if req.ItemID == "" {
		httpserver.Abort(c, ErrItemIDMissing)
		return token.Admission{}, false
	}
	raw := req.Token
	if raw == "" {
		raw = httpserver.Bearer(c.GetHeader("Authorization"))
	}
	a, err := registration.AuthorizeAdmission(s.admit, req.ItemID, raw)
	if err != nil {
		httpserver.Abort(c, err)
		return token.Admission{}, false
	}
	if !s.allowToken(c, byAdmission, a.TokenID) {
		return token.Admission{}, false
	}
	if b, ok := s.blocks.user("admission", a.UserID); ok {
		httpserver.Abort(c, registration.Blocked(b))
		return token.Admission{}, false
	}
	return a, true
}

// liveAdmission checks a's admission is still in the item's admitted set and
// unexpired. When it cannot tell or the admission ended, it has answered (503,
// or 410 ADMISSION_ENDED) and returns false.
func (s *Server) liveAdmission(ctx context.Context, c *gin.Context, a token.Admission) (until time.Time, ok bool) {
	if view.GateItem(c, s.opt.View, a.ItemID) { // its node lost its keys: until it is rebuilt
		s.m.viewRefused.Inc()
		return time.Time{}, false
	}
	until, live, err := s.line.HeldUntil(ctx, a.ItemID, a.TokenID)
	if s.refuseView(c, a.ItemID, err) {
		return time.Time{}, false
	}
	if err != nil {
		s.log.Warn("read admission", zap.String("item", a.ItemID), zap.String("route", c.FullPath()), zap.Error(err))
		httpserver.Abort(c, registration.Unavailable("admissions cannot be read right now; retry shortly"))
		return time.Time{}, false
	}
	if !live || !until.After(s.now()) {
		httpserver.Abort(c, registration.ErrAdmissionEnded)
		return time.Time{}, false
	}
	return until, true
}

// verify answers 200 while the admission is live: signed by us, for the item
// asked, and still in the item's admitted set (not expired, not completed).
func (s *Server) verify(c *gin.Context) {
	a, ok := s.admission(c)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opt.StatusTimeout)
	defer cancel()
	until, ok := s.liveAdmission(ctx, c, a)
	if !ok {
		return
	}
	c.JSON(http.StatusOK, AdmissionResponse{Valid: true, Status: registration.StatusAdmitted, ItemID: a.ItemID, UserID: a.UserID,
		TokenID: a.TokenID, ExpiresAt: until.UTC().Format(time.RFC3339Nano)})
}

// complete ends a live admission at once, freeing its place. The completion is
// recorded on the registrations topic first (Kafka is the record), then
// applied to Redis without waiting for the consumer.
func (s *Server) complete(c *gin.Context) {
	a, ok := s.admission(c)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.opt.StatusTimeout)
	defer cancel()
	if _, ok := s.liveAdmission(ctx, c, a); !ok {
		return
	}
	client := clientMeta(c, c.ClientIP())
	ev := topics.RegistrationEvent{V: topics.Version, Kind: topics.KindComplete, TokenID: a.TokenID, ItemID: a.ItemID,
		UserID: a.UserID, Holder: a.Holder, RequestedAt: s.now().UnixMilli(), Client: &client}
	if _, _, ok := s.produce(c, &ev); !ok {
		return
	}
	// Recorded: free the place now rather than when the consumer gets to it
	// (whichever is first does it; the other changes nothing).
	if _, err := s.line.Complete(ctx, a.ItemID, a.TokenID, a.PlaceKey()); err != nil {
		s.log.Warn("complete admission in redis; the consumer applies it", zap.String("item", a.ItemID), zap.Error(err))
	}
	c.JSON(http.StatusOK, AdmissionResponse{Valid: false, Status: registration.StatusCompleted, ItemID: a.ItemID, UserID: a.UserID, TokenID: a.TokenID})
}

// jwks publishes the public key that verifies admission tokens offline.
func (s *Server) jwks(c *gin.Context) {
	set, ok := s.admit.PublicJWKS()
	if !ok {
		httpserver.Abort(c, registration.ErrNoPublicKey)
		return
	}
	c.Header("Cache-Control", "public, max-age=300")
	c.JSON(http.StatusOK, set)
}
