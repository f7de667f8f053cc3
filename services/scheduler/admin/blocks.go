package admin

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/kafka/blocklist"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Blocks is the in-memory view of waitroom.blocks (*blocklist.List).
type Blocks interface {
	All() []topics.BlockState
	Sync(ctx context.Context) error
	// Skipped counts malformed records of the topic (logged, blocking nobody).
	Skipped() int64
}

// WithBlocks lets the admin API list the blocks (the block routes answer
// 409 BLOCKS_DISABLED without it). It returns s.
func (s *Server) WithBlocks(b Blocks) *Server {
	s.blocks = b
	return s
}

// BlockRequest is the body of POST .../blocks.
type BlockRequest struct {
	// Subject is "user:<userId>" or "ip:<address or CIDR>".
	Subject string `json:"subject"`
	Reason  string `json:"reason"`
	// Until (unix ms) ends the block by itself; ForSeconds does the same
	// from now. Neither: until lifted.
	Until      int64 `json:"until"`
	ForSeconds int64 `json:"forSeconds"`
}

// BlockView is a block as the admin API shows it.
type BlockView struct {
	topics.BlockState
	Active bool `json:"active"` // in force now (not expired)
}

// BlocksResponse is the answer to GET .../blocks.
type BlocksResponse struct {
	Blocks []BlockView `json:"blocks"`
}

func (s *Server) blockRoutes(g gin.IRouter) {
	g.GET("/blocks", s.listBlocks)
	g.POST("/blocks", s.addBlock)
	g.DELETE("/blocks", s.liftBlock)
}

func (s *Server) blocksReady(c *gin.Context) bool {
	if s.blocks == nil {
		httpserver.Abort(c, registration.Refuse(http.StatusConflict, "BLOCKS_DISABLED", "this server does not follow "+topics.Blocks))
		return false
	}
	return true
}

func (s *Server) blockViews() []BlockView {
	now := s.now().UnixMilli()
	all := s.blocks.All()
	out := make([]BlockView, len(all))
	for i, b := range all {
		out[i] = BlockView{BlockState: b, Active: b.Active(now)}
	}
	return out
}

func (s *Server) listBlocks(c *gin.Context) {
	if !s.blocksReady(c) {
		return
	}
	c.JSON(http.StatusOK, BlocksResponse{Blocks: s.blockViews()})
}

// addBlock records a block on waitroom.blocks; every api replica follows
// the topic and refuses the subject from then on.
func (s *Server) addBlock(c *gin.Context) {
	if !s.blocksReady(c) {
		return
	}
	var req BlockRequest
	if !decodeBody(c, &req) {
		return
	}
	now := s.now()
	b := topics.BlockState{Subject: req.Subject, Reason: strings.TrimSpace(req.Reason), Until: req.Until, At: now.UnixMilli()}
	switch {
	case req.Until != 0 && req.ForSeconds != 0:
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_BLOCK", "give until or forSeconds, not both"))
		return
	case req.ForSeconds < 0:
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_BLOCK", "forSeconds must not be negative"))
		return
	case req.ForSeconds > (math.MaxInt64-now.UnixMilli())/1000: // its until would wrap around
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_BLOCK", "forSeconds "+strconv.FormatInt(req.ForSeconds, 10)+" is too large"))
		return
	case req.ForSeconds > 0:
		b.Until = now.UnixMilli() + req.ForSeconds*1000
	case req.Until != 0 && req.Until <= now.UnixMilli():
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_BLOCK", "until is in the past"))
		return
	}
	rec, err := blocklist.Record(b)
	if err != nil {
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_BLOCK", strings.TrimPrefix(err.Error(), topics.ErrInvalid.Error()+": ")))
		return
	}
	if !s.publishBlock(c, rec.Key, rec.Value) {
		return
	}
	b.V, b.Subject = topics.Version, string(rec.Key)
	s.log.Info("admin: blocked", zap.String("subject", b.Subject), zap.String("reason", b.Reason), zap.Int64("until", b.Until))
	c.JSON(http.StatusOK, BlockView{BlockState: b, Active: true})
}

// liftBlock answers DELETE .../blocks?subject=: a tombstone on
// waitroom.blocks lifts the block.
func (s *Server) liftBlock(c *gin.Context) {
	if !s.blocksReady(c) {
		return
	}
	rec, err := blocklist.Lift(c.Query("subject"))
	if err != nil {
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_BLOCK", strings.TrimPrefix(err.Error(), topics.ErrInvalid.Error()+": ")))
		return
	}
	if !s.publishBlock(c, rec.Key, nil) {
		return
	}
	s.log.Info("admin: block lifted", zap.String("subject", string(rec.Key)))
	c.JSON(http.StatusOK, gin.H{"lifted": string(rec.Key)})
}

// publishBlock produces one record to waitroom.blocks and waits until this
// server's list has read it; on failure it has answered 503.
func (s *Server) publishBlock(c *gin.Context, key, value []byte) bool {
	ctx, cancel := context.WithTimeout(c.Request.Context(), callTimeout)
	defer cancel()
	rec := newRecord(topics.Blocks, key, value)
	if err := s.prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
		s.log.Warn("admin: publish block", zap.String("subject", string(key)), zap.Error(err))
		c.Header("Retry-After", "1")
		httpserver.Abort(c, registration.Refuse(http.StatusServiceUnavailable, "UNAVAILABLE", "could not publish to "+topics.Blocks+"; nothing changed, retry shortly"))
		return false
	}
	if err := s.blocks.Sync(ctx); err != nil && !errors.Is(err, context.Canceled) {
		// Recorded: the replicas apply it as they read it; only our listing lags.
		s.log.Warn("admin: read back the block", zap.String("subject", string(key)), zap.Error(err))
	}
	return true
}

func newRecord(topic string, key, value []byte) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: key, Value: value}
}
