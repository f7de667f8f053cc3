package admin

import (
	"context"
	"crypto/ed25519"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/security/bypass"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"go.uber.org/zap"
)

// WithBypass lets the admin API issue bypass codes signed with key
// (WR_BYPASS_KEY); without it POST .../bypass answers 409 BYPASS_DISABLED.
func (s *Server) WithBypass(key ed25519.PrivateKey) *Server {
	s.bypassKey = key
	return s
}

// BypassRequest is the body of POST .../items/:itemId/bypass.
type BypassRequest struct {
	Count      int64 `json:"count"`
	TTLSeconds int64 `json:"ttlSeconds"`
}

// BypassResponse is an issued code: hand Code to the person it is for.
type BypassResponse struct {
	Code      string `json:"code"`
	ID        string `json:"id"`
	ItemID    string `json:"itemId"`
	Count     int64  `json:"count"`
	ExpiresAt string `json:"expiresAt"`
}

// issueBypass answers POST .../items/:itemId/bypass {count, ttlSeconds}
// with a signed code for a known item. Issuing writes nothing: each use is
// recorded on waitroom.registrations (the register record carries the code's
// id), which is the audit trail; the code's id is logged here.
func (s *Server) issueBypass(c *gin.Context) {
	item, ok := itemID(c)
	if !ok {
		return
	}
	if s.bypassKey == nil {
		httpserver.Abort(c, registration.Refuse(http.StatusConflict, "BYPASS_DISABLED", "no bypass key: set WR_BYPASS_KEY on the scheduler"))
		return
	}
	var req BypassRequest
	if !decodeBody(c, &req) {
		return
	}
	if _, known := s.items.Get(item); !known {
		httpserver.Abort(c, registration.Refuse(http.StatusNotFound, "ITEM_NOT_FOUND", "no item "+item))
		return
	}
	if maxTTL := int64(bypass.MaxTTL / time.Second); req.TTLSeconds < 1 || req.TTLSeconds > maxTTL { // in seconds, before a Duration wraps
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_BYPASS", "ttlSeconds "+strconv.FormatInt(req.TTLSeconds, 10)+" is not in 1.."+strconv.FormatInt(maxTTL, 10)))
		return
	}
	code, raw, err := bypass.Issue(s.bypassKey, item, req.Count, time.Duration(req.TTLSeconds)*time.Second, s.now())
	if err != nil {
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_BYPASS", err.Error()))
		return
	}
	s.log.Info("bypass code issued", zap.String("item", item), zap.String("code", code.ID), zap.Int64("count", code.Count), zap.Time("expiresAt", code.ExpiresAt))
	c.JSON(http.StatusOK, BypassResponse{Code: raw, ID: code.ID, ItemID: item, Count: code.Count, ExpiresAt: code.ExpiresAt.UTC().Format(time.RFC3339)})
}

// BypassUses is the body of GET .../items/:itemId/bypass: the uses so far of
// each code that placed someone (from the line; the record has each use).
type BypassUses struct {
	ItemID string           `json:"itemId"`
	Uses   map[string]int64 `json:"uses"`
}

func (s *Server) bypassUses(c *gin.Context) {
	item, ok := itemID(c)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), callTimeout)
	defer cancel()
	uses, err := s.line.BypassUsesAll(ctx, item)
	if err != nil {
		s.unavailable(c, "read bypass uses", item, err)
		return
	}
	c.JSON(http.StatusOK, BypassUses{ItemID: item, Uses: uses})
}
