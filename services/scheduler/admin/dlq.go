package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

const (
	dlqReadTimeout  = 30 * time.Second // one listing or show
	defaultDLQLimit = 100
	maxDLQLimit     = 10_000 // bounds one answer's size
)

// WithKafka lets the server read and replay the DLQs, with clients built from
// base (kclient.Opts: seed brokers, client id, logger, TLS and SASL). Without it the DLQ
// routes answer 409 DLQ_DISABLED. It returns s.
func (s *Server) WithKafka(base []kgo.Opt) *Server {
	s.dlqs, s.replayer = dlq.NewInspector(base), dlq.NewReplayer(base)
	return s
}

// DLQReplayRequest is the body of POST .../dlq/replay; every field is optional.
type DLQReplayRequest struct {
	// Topic is the DLQ: registrations (default), items, admissions or a full name.
	Topic       string `json:"topic"`
	ErrorType   string `json:"errorType"`
	SourceTopic string `json:"sourceTopic"`
	// Since is an RFC 3339 time or a duration back from now ("2h").
	Since string `json:"since"`
	// Limit caps the letters replayed or kept back; 0: no cap.
	Limit  int     `json:"limit"`
	DryRun bool    `json:"dryRun"`
	Rate   float64 `json:"rate"`
	Force  bool    `json:"force"`
	Reset  bool    `json:"reset"`
}

// listDLQ answers GET .../dlq?topic=&errorType=&sourceTopic=&since=&limit=
// with a dlq.List.
func (s *Server) listDLQ(c *gin.Context) {
	if !s.dlqReady(c) {
		return
	}
	topic, ok := dlqTopic(c, c.Query("topic"))
	if !ok {
		return
	}
	limit := defaultDLQLimit
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxDLQLimit {
			httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_QUERY", "limit must be a number in 1.."+strconv.Itoa(maxDLQLimit)))
			return
		}
		limit = n
	}
	since, err := dlq.ParseSince(c.Query("since"), s.now())
	if err != nil {
		s.dlqError(c, "list", topic, err)
		return
	}
	f := dlq.Filter{SourceTopic: c.Query("sourceTopic"), ErrorType: c.Query("errorType"), Since: since, Limit: limit}
	ctx, cancel := context.WithTimeout(c.Request.Context(), dlqReadTimeout)
	defer cancel()
	l, err := s.dlqs.List(ctx, topic, f)
	if err != nil {
		s.dlqError(c, "list", topic, err)
		return
	}
	c.JSON(http.StatusOK, l)
}

// showDLQ answers GET .../dlq/:partition/:offset?topic= with a dlq.Entry.
func (s *Server) showDLQ(c *gin.Context) {
	if !s.dlqReady(c) {
		return
	}
	topic, ok := dlqTopic(c, c.Query("topic"))
	if !ok {
		return
	}
	p, o, err := dlq.ParseID(c.Param("partition") + "/" + c.Param("offset"))
	if err != nil {
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_PATH", err.Error()))
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), dlqReadTimeout)
	defer cancel()
	e, err := s.dlqs.Show(ctx, topic, p, o)
	if err != nil {
		s.dlqError(c, "show", topic, err)
		return
	}
	c.JSON(http.StatusOK, e)
}

// replayDLQ answers POST .../dlq/replay with a dlq.Report. One replay runs at
// a time per replica; the request's context bounds it.
func (s *Server) replayDLQ(c *gin.Context) {
	if !s.dlqReady(c) {
		return
	}
	var req DLQReplayRequest
	if !decodeBody(c, &req) {
		return
	}
	topic, ok := dlqTopic(c, req.Topic)
	if !ok {
		return
	}
	since, err := dlq.ParseSince(req.Since, s.now())
	if err != nil {
		s.dlqError(c, "replay", topic, err)
		return
	}
	if !s.replaying.TryLock() {
		httpserver.Abort(c, registration.Refuse(http.StatusConflict, "REPLAY_RUNNING", "a replay is already running on this scheduler; wait for it to finish"))
		return
	}
	defer s.replaying.Unlock()
	o := dlq.ReplayOptions{
		Filter: dlq.Filter{SourceTopic: req.SourceTopic, ErrorType: req.ErrorType, Since: since, Limit: req.Limit},
		DryRun: req.DryRun, Rate: req.Rate, Force: req.Force, Reset: req.Reset,
	}
	rep, err := s.replayer.Replay(c.Request.Context(), topic, o)
	if err != nil {
		if rep.Replayed > 0 && !req.DryRun {
			err = errors.Join(err, errors.New("replayed "+strconv.Itoa(rep.Replayed)+" records before the error"))
		}
		s.dlqError(c, "replay", topic, err)
		return
	}
	s.log.Info("admin: dlq replay", zap.String("topic", topic), zap.Bool("dryRun", rep.DryRun), zap.Int("examined", rep.Examined),
		zap.Int("replayed", rep.Replayed), zap.Int("stillInvalid", rep.StillInvalid), zap.Int("notMatched", rep.NotMatched), zap.Int("failedAgain", rep.FailedAgain))
	c.JSON(http.StatusOK, rep)
}

func (s *Server) dlqReady(c *gin.Context) bool {
	if s.dlqs == nil {
		httpserver.Abort(c, registration.Refuse(http.StatusConflict, "DLQ_DISABLED", "this scheduler was started without Kafka access for the DLQs"))
		return false
	}
	return true
}

// dlqTopic resolves a topic parameter ("" is registrations); on a bad one it
// has answered 400.
func dlqTopic(c *gin.Context, name string) (string, bool) {
	if name == "" {
		name = topics.Registrations
	}
	t, err := dlq.Topic(name)
	if err != nil {
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_TOPIC", err.Error()))
		return "", false
	}
	return t, true
}

// dlqError maps a pkg/kafka/dlq error to its answer.
func (s *Server) dlqError(c *gin.Context, what, topic string, err error) {
	msg := err.Error()
	switch {
	case errors.Is(err, dlq.ErrBadOptions):
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_FILTER", strings.TrimPrefix(msg, dlq.ErrBadOptions.Error()+": ")))
	case errors.Is(err, dlq.ErrNoTopic):
		httpserver.Abort(c, registration.Refuse(http.StatusNotFound, "TOPIC_NOT_FOUND", msg))
	case errors.Is(err, dlq.ErrNotFound):
		httpserver.Abort(c, registration.Refuse(http.StatusNotFound, "NOT_FOUND", msg))
	default:
		s.log.Warn("admin: dlq "+what, zap.String("topic", topic), zap.Error(err))
		c.Header("Retry-After", "1")
		httpserver.Abort(c, registration.Refuse(http.StatusServiceUnavailable, "UNAVAILABLE", "Kafka: "+msg))
	}
}
