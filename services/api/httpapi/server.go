// Package httpapi is the registration API: register for an item's line, read
// where a registration stands, leave the line. The register path makes no
// Redis round trip: it checks the item in memory, produces to Kafka, and
// answers once the broker has the record.
package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unsafe"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/fieldmac"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/liveness"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Items is where the API looks items up (the in-memory item cache).
type Items interface {
	Get(item string) (topics.ItemState, bool)
}

// Producer sends a record to Kafka and calls promise with the broker's answer
// (*kgo.Client): TryProduce fails it at once with kgo.ErrMaxBuffered when the
// client's buffer is full, Produce waits for room until ctx ends.
type Producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	TryProduce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
}

// Line reads where a registration stands and ends admissions (*queue.Line).
type Line interface {
	Status(ctx context.Context, item, key, tokenID string, partition int32, offset int64) (line.Status, error)
	Motion(ctx context.Context, item string) (line.Motion, error)
	HeldUntil(ctx context.Context, item, tokenID string) (time.Time, bool, error)
	Complete(ctx context.Context, item, tokenID, key string) (bool, error)
}

// Options tune the API.
type Options struct {
	MaxBodyBytes   int64
	QueueTokenTTL  time.Duration
	ProduceTimeout time.Duration
	StatusTimeout  time.Duration
	// View, when set, gates status, verify and complete on a trusted Redis view.
	View *view.Watcher
	// Throttle, when set, limits registrations per address and per user,
	// and the other calls per token and per address.
	Throttle *Throttle
	// Blocks, when set, refuses blocked users and addresses (403 BLOCKED).
	Blocks Blocks
	// StatusExactEvery is how long a waiting registration's exact read answers
	// its later reads, moved by the item's head (0: every read is exact);
	// MotionFresh how old the item's head and counts may be; StatusTokens how
	// many registrations' reads are kept.
	StatusExactEvery time.Duration
	MotionFresh      time.Duration
	StatusTokens     int
	// Guard holds the proof-of-work and bypass-code checks.
	Guard Guard
	// Seen, when set, collects the polls of places of items with an
	// idleTimeout as signs of life (pkg/store/liveness; its Run flushes them).
	Seen *liveness.Tracker
	// Refusals, when set, counts refused registrations per item and code
	// for the console (its Run flushes them).
	Refusals *Refusals
	// AutoWait is how long an auto registration (RegisterRequest.Auto) of
	// an item with room waits for the scheduler to admit it (0: never
	// waits, every auto registration is answered QUEUED).
	AutoWait time.Duration
	// Signals keeps the sites' health reports; SignalToken is the bearer a
	// site posts them with (either unset: the signal route answers
	// SIGNAL_DISABLED).
	Signals     Signals
	SignalToken string
	// CursorKey signs the status cursors (StatusCursorKey; every replica
	// the same key). Empty: a random key, good on this replica only.
	CursorKey []byte
}

// Server serves the registration routes.
type Server struct {
	items  Items
	prod   Producer
	line   Line
	signer *token.Signer
	admit  *token.Signer // admission tokens: Ed25519, published as JWKS
	opt    Options
	log    *zap.Logger
	m      *metrics
	now    func() time.Time
	pos    *positions // nil: every status read is exact
	// cursors signs the status answers' cursors (told.go).
	cursors *fieldmac.Signer
	blocks  *blockGate // nil: nobody is blocked
	waits   *produceWaits
}

// NewServer returns a Server; metrics are registered on reg.
func NewServer(items Items, prod Producer, line Line, signer, admit *token.Signer, opt Options, reg prometheus.Registerer, log *zap.Logger) *Server {
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = 4096
	}
	if opt.QueueTokenTTL <= 0 {
		opt.QueueTokenTTL = 24 * time.Hour
	}
	if opt.ProduceTimeout <= 0 {
		opt.ProduceTimeout = 5 * time.Second
	}
	if opt.StatusTimeout <= 0 {
		opt.StatusTimeout = 2 * time.Second
	}
	if opt.MotionFresh <= 0 {
		opt.MotionFresh = 250 * time.Millisecond
	}
	if opt.StatusTokens <= 0 {
		opt.StatusTokens = 1_000_000
	}
	line = ConfirmedLine(line, opt.View)
	s := &Server{items: items, prod: prod, line: line, signer: signer, admit: admit, opt: opt, log: log, m: newMetrics(reg), now: time.Now,
		waits: &produceWaits{timeout: opt.ProduceTimeout}}
	s.blocks = newBlockGate(opt.Blocks, reg)
	s.cursors = fieldmac.Random()
	if len(opt.CursorKey) > 0 {
		s.cursors = fieldmac.New(opt.CursorKey)
	}
	if opt.StatusExactEvery > 0 {
		s.pos = newPositions(line, opt.View, opt.MotionFresh, opt.StatusExactEvery, opt.StatusTokens, opt.StatusTimeout)
		if b := opt.Throttle.memBucket(byStatus); b != nil {
			s.pos.useBucket(b) // one look-up per status read for its bucket and place
		}
	}
	return s
}

// Routes adds the API's routes to r.
func (s *Server) Routes(r gin.IRouter) {
	g := r.Group("/api/v1/items/:itemId/registrations")
	g.POST("", s.countRefusal, s.register)
	g.GET("/:token", s.tokenCall(byStatus, s.gateItem, s.status))
	g.DELETE("/:token", s.tokenCall(byLeave, nil, s.leave))
	r.GET("/api/v1/items/:itemId/challenge", s.limitCalls, s.challenge)
	r.POST("/api/v1/admissions/verify", s.gateView, s.verify)
	r.POST("/api/v1/admissions/complete", s.gateView, s.complete)
	r.POST("/api/v1/items/:itemId/signal", s.signal)
	r.GET("/.well-known/jwks.json", s.jwks)
}

// RegisterResponse is the 202 answer to a registration.
type RegisterResponse struct {
	Status    string `json:"status"`
	ItemID    string `json:"itemId"`
	UserID    string `json:"userId"`
	TokenID   string `json:"tokenId"`
	Token     string `json:"token"`
	StatusURL string `json:"statusUrl"`
	EventsURL string `json:"eventsUrl"`
	// DrawAt (unix ms) is when the draw that places a PRE_QUEUE registration
	// is due; OpensAt the sale's opening, when it is scheduled.
	DrawAt  int64 `json:"drawAt,omitempty"`
	OpensAt int64 `json:"opensAt,omitempty"`
	// AdmissionToken and ExpiresAt answer an auto registration the
	// scheduler admitted within the api's wait (status ADMITTED, 200).
	AdmissionToken string `json:"admissionToken,omitempty"`
	ExpiresAt      string `json:"expiresAt,omitempty"`
}

func (s *Server) register(c *gin.Context) {
	item, ip, req, ok := s.readRegistration(c)
	if !ok {
		return
	}
	user, holder, proof, ok := s.identify(c, item, req)
	if !ok {
		return
	}
	if !s.blocks.register(c, user, ip) {
		return
	}
	st, ok := s.decide(c, item, req.Auto)
	if !ok {
		return
	}
	use, ok := s.guard(c, item, st, req)
	if !ok {
		return
	}
	tokenID := tokenIDFor(item, user, req.RequestID)
	if proof.ID != "" && !s.spend(c.Request.Context(), c, proof, derivedID(tokenID, req.RequestID)) {
		return
	}
	if user == "" {
		user = "anon-" + strings.ToLower(tokenIDFor(item, "anon", req.RequestID))
	}
	client := clientMeta(c, ip)
	ev := topics.RegistrationEvent{
		V: topics.Version, Kind: topics.KindRegister, TokenID: tokenID, ItemID: item, UserID: user,
		RequestedAt: s.now().UnixMilli(), Client: &client, Bypass: use, Holder: holder,
	}
	// A bypass code's place skips any draw (admitted at the next tick).
	window, pre := int64(0), false
	if use == nil {
		window, pre = registration.DrawWindow(st, time.UnixMilli(ev.RequestedAt))
	}
	ev.Window = window
	// Read before the record is sent: a line that formed before this
	// registration means it waits behind it, on the page.
	room := req.Auto && !pre && s.hasRoom(c.Request.Context(), item, st)
	part, off, ok := s.produce(c, &ev)
	if !ok {
		return
	}
	q := token.Queue{TokenID: ev.TokenID, ItemID: item, UserID: user, Holder: holder, Partition: part, Offset: off}
	buf := httpserver.Buffer()
	defer httpserver.PutBuffer(buf) // after the answer: its token and URLs are views of buf
	resp := RegisterResponse{Status: registration.StatusQueued, ItemID: item, UserID: user, TokenID: ev.TokenID}
	if err := s.signQueue(buf, &resp, q); err != nil {
		s.log.Error("sign queue token", zap.Error(err))
		httpserver.Abort(c, registration.Internal("could not sign the queue token"))
		return
	}
	if pre {
		resp.Status, resp.DrawAt, resp.OpensAt = registration.StatusPreQueue, window, st.OpensAt
	}
	if req.Auto {
		s.answerAuto(c, &resp, q, room)
		return
	}
	resp.write(c, http.StatusAccepted)
}

// signQueue signs q's queue token for resp, a 202, and its URLs: buf holds
// "/api/v1/items/<item>/registrations/<token>/events", and resp's Token,
// StatusURL and EventsURL are views of it, so the answer allocates neither
// the token (~370 bytes) nor its URLs, good until buf goes back to the pool. The item id is checked (registration.CheckItemID) and the token is
// base64url and dots: neither needs escaping in a path.
func (s *Server) signQueue(buf *[]byte, resp *RegisterResponse, q token.Queue) error {
	b := append(append(append(*buf, "/api/v1/items/"...), q.ItemID...), "/registrations/"...)
	at := len(b)
	b, err := s.signer.AppendQueue(b, q, s.opt.QueueTokenTTL)
	if err != nil {
		return fmt.Errorf("sign the queue token: %w", err)
	}
	end := len(b)
	*buf = append(b, "/events"...)
	all := unsafe.String(unsafe.SliceData(*buf), len(*buf)) // buf is not written again while resp is answered
	resp.Token, resp.StatusURL, resp.EventsURL = all[at:end], all[:end], all
	return nil
}

// readRegistration checks a registration's item id, the address's bucket
// (first: a flood is refused before any work) and reads and decodes its
// body; on a refusal it has answered and ok is false.
func (s *Server) readRegistration(c *gin.Context) (item, ip string, req RegisterRequest, ok bool) {
	item = c.Param("itemId")
	if err := registration.CheckItemID(item); err != nil {
		httpserver.Abort(c, err)
		return item, "", req, false
	}
	ip = c.ClientIP() // parsed once: X-Forwarded-For against the trusted proxies
	if allowed, by, wait := s.opt.Throttle.AllowAddr(c.Request.Context(), byIP, byIP48, ip); !allowed {
		httpserver.Abort(c, registration.RateLimited(by, wait))
		return item, ip, req, false
	}
	buf, err := s.readBody(c)
	defer httpserver.PutBuffer(buf) // the request's strings are copies
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			httpserver.Abort(c, registration.BodyTooLarge(s.opt.MaxBodyBytes))
			return item, ip, req, false
		}
		httpserver.Abort(c, registration.BadRequest("INVALID_BODY", "reading request body: "+err.Error()))
		return item, ip, req, false
	}
	req, rerr := DecodeRegisterRequest(*buf)
	if rerr != nil {
		httpserver.Abort(c, registration.BadRequest(rerr.Code, rerr.Message))
		return item, ip, req, false
	}
	return item, ip, req, true
}

// answerAuto answers an auto registration: 200 ADMITTED with the admission
// when the item had room and the scheduler admitted the place within
// AutoWait, else 202 QUEUED like any other.
func (s *Server) answerAuto(c *gin.Context, resp *RegisterResponse, q token.Queue, room bool) {
	if !room {
		s.m.auto.WithLabelValues(autoLine).Inc()
		resp.write(c, http.StatusAccepted)
		return
	}
	a, ok := s.awaitAdmission(c.Request.Context(), q)
	if !ok {
		s.m.auto.WithLabelValues(autoLate).Inc()
		resp.write(c, http.StatusAccepted)
		return
	}
	if err := s.admitted(resp, q, a); err != nil {
		s.log.Error("sign admission token", zap.Error(err))
		httpserver.Abort(c, registration.Internal("could not sign the admission token"))
		return
	}
	s.m.auto.WithLabelValues(autoAdmitted).Inc()
	resp.write(c, http.StatusOK)
}

// decide looks item up and refuses what it does not take now
// (registration.Decide, or DecideAuto for an auto registration); on a
// refusal it has answered and ok is false.
func (s *Server) decide(c *gin.Context, item string, auto bool) (st topics.ItemState, ok bool) {
	st, known := s.items.Get(item)
	decide := registration.Decide
	if auto {
		decide = registration.DecideAuto
	}
	if err := decide(item, st, known); err != nil {
		httpserver.Abort(c, err)
		return st, false
	}
	return st, true
}

// tokenIDFor is a registration's tokenId: random, or derived from the item,
// the userId and the client's requestId when one was sent. A client whose
// answer was lost (a timeout, a reset link, a 503 after the broker had the
// record) retries with the same requestId and so names the same place; with
// a random id each retry made a second place nobody holds, which the
// scheduler admitted in turn and which then held an admission for the whole
// session (the chaos run's collapsed line, RELIABILITY.md). The consumer
// places a token once (pkg/store/queue enqueue.lua), so a retry after that place
// ended finds it ended. No secret: the tokenId alone grants nothing, and the
// token for it is only answered to a request that carries the requestId.
func tokenIDFor(item, user, requestID string) string {
	if requestID == "" {
		return rand.Text()
	}
	var in [512]byte // what a registration's body allows fits: no allocation
	h := sha256.Sum256(append(append(append(append(append(in[:0], item...), 0), user...), 0), requestID...))
	return tokenIDEncoding.EncodeToString(h[:16])
}

// derivedID is tokenID when it was derived from requestID (tokenIDFor),
// "" when it is random (no requestId).
func derivedID(tokenID, requestID string) string {
	if requestID == "" {
		return ""
	}
	return tokenID
}

// tokenIDEncoding writes a derived tokenId (WithPadding copies the encoding
// it returns: made once).
var tokenIDEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// produce sends ev keyed by its item and waits for the broker, at most the
// produce timeout (produceBounded); on failure it has answered 503 and
// returns false.
//
// It waits on the record's promise, not in ProduceSync: the Kafka client
// fails a record whose time is up only while it is not yet sent, and one
// already on a connection that stopped answering (a link that holds, a
// broker that hangs) waits for that connection's own timeouts, far past
// ours (the nemesis's probes of an api cut from Kafka waited over 10 s).
// Answered 503 at the deadline, the record may still be written later; a
// retry with the same requestId names the same place (tokenIDFor).
func (s *Server) produce(c *gin.Context, ev *topics.RegistrationEvent) (part int32, off int64, ok bool) {
	start := time.Now()
	part, off, err := s.produceBounded(c.Request.Context(), ev, start)
	s.m.produce.Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.produceErrors.Inc()
		s.log.Warn("produce registration event", zap.String("item", ev.ItemID), zap.String("kind", ev.Kind), zap.Error(err))
		httpserver.Abort(c, registration.Unavailable("the queue could not record the request; retry shortly"))
		return 0, 0, false
	}
	return part, off, true
}

// clientMeta describes the request's client at ip (gin's ClientIP): its
// network, never its address (networkOf).
func clientMeta(c *gin.Context, ip string) topics.ClientMeta {
	ua := c.Request.UserAgent()
	if len(ua) > 256 {
		ua = ua[:256]
	}
	return topics.ClientMeta{IP: networkOf(ip), UserAgent: ua}
}

// readBody reads the request's body, at most MaxBodyBytes, into a pooled
// buffer (httpserver.PutBuffer gives it back). A body over the limit is
// refused by http.MaxBytesReader, as every body was before (*http.MaxBytesError,
// and the connection closed after the answer); under it, no reader is made.
func (s *Server) readBody(c *gin.Context) (*[]byte, error) {
	buf := httpserver.Buffer()
	limit := int(s.opt.MaxBodyBytes)
	for b := *buf; ; {
		if len(b) > limit {
			*buf = b
			over := io.NopCloser(io.MultiReader(bytes.NewReader(b), c.Request.Body))
			_, err := io.Copy(io.Discard, http.MaxBytesReader(c.Writer, over, s.opt.MaxBodyBytes))
			return buf, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := c.Request.Body.Read(b[len(b):min(cap(b), limit+1)])
		b = b[:len(b)+n]
		if err != nil {
			*buf = b
			if err == io.EOF {
				return buf, nil
			}
			return buf, err
		}
	}
}

// StatusResponse is where a registration stands.
type StatusResponse struct {
	Status       string `json:"status"`
	ItemID       string `json:"itemId"`
	UserID       string `json:"userId"`
	TokenID      string `json:"tokenId"`
	Position     int64  `json:"position,omitempty"`
	WaitingTotal int64  `json:"waitingTotal,omitempty"`
	// EtaSeconds estimates the wait (registration.ETA); absent while paused.
	EtaSeconds     *int64 `json:"etaSeconds,omitempty"`
	AdmissionToken string `json:"admissionToken,omitempty"`
	ExpiresAt      string `json:"expiresAt,omitempty"`
	// Token, when set, is a new queue token for this place: the answer of a
	// proven user's repeat registration that resumed the user's place. The
	// client uses it (and its tokenId) from then on.
	Token string `json:"token,omitempty"`
	// PollAfterMs is when to read the status again (registration.PollAfter),
	// also sent as Retry-After in seconds; absent once it cannot change.
	PollAfterMs int64 `json:"pollAfterMs,omitempty"`
	// Message says why, for BLOCKED (the block's reason) and REJECTED (the
	// item's rejectMessage, when one is set).
	Message string `json:"message,omitempty"`
	// DrawAt (unix ms) is when the draw that places a PRE_QUEUE registration
	// is due, InDraw how many it places so far.
	DrawAt int64 `json:"drawAt,omitempty"`
	InDraw int64 `json:"inDraw,omitempty"`
	// Notice is the operator's message to everyone waiting for the item.
	Notice string `json:"notice,omitempty"`
	// Cursor (WAITING) is what this answer told, signed: sent back as
	// ?cursor= on the next read, no later answer tells a larger position.
	Cursor string `json:"cursor,omitempty"`
}

func (s *Server) status(c *gin.Context, pq parsedQueue) {
	q, err := pq.q, pq.err
	if err != nil {
		httpserver.Abort(c, err)
		return
	}
	if b, ok := s.blocks.user("status", q.UserID); ok {
		resp := StatusResponse{Status: registration.StatusBlocked, ItemID: q.ItemID, UserID: q.UserID, TokenID: q.TokenID,
			Message: registration.BlockMessage(b)}
		resp.write(c, http.StatusOK)
		return
	}
	// Each Redis read below bounds itself by StatusTimeout: an answer from
	// memory, the common case, sets no timer.
	// The item, its view generation and the time are each read once per
	// answer; the generation before the read (positions.remember's).
	ctx := c.Request.Context()
	gen := s.opt.View.ItemGen(q.ItemID)
	it, known := s.items.Get(q.ItemID)
	every := exactEveryOf(it)
	st, err := s.readStatus(ctx, q, gen, every, pq.look)
	resumed := ""
	if err == nil && st.State == line.Duplicated && st.TokenID != "" && q.Proven() {
		rctx, cancel := context.WithTimeout(ctx, s.opt.StatusTimeout)
		q, resumed, st, err = s.resume(rctx, q, st.TokenID, gen, every)
		cancel()
	}
	if s.refuseView(c, q.ItemID, err) {
		return
	}
	if err != nil {
		s.log.Warn("read status", zap.String("item", q.ItemID), zap.Error(err))
		httpserver.Abort(c, registration.Unavailable("the line cannot be read right now; retry shortly"))
		return
	}
	now := s.now() // after the read: an admission that ended during it is told ended
	a := registration.AnswerOf(st, registration.VerdictOf(it, known), now)
	cursor := ""
	if a.Status == registration.StatusWaiting && a.Position > 0 {
		a.Position, cursor = s.told(cursorOf(c), q.ItemID, q.TokenID, a.Position, now)
	}
	if it.IdleTimeoutSeconds > 0 && liveness.Counts(a.Status) {
		s.opt.Seen.Touch(q.ItemID, q.TokenID, q.PlaceKey(), now)
	}
	resp := StatusResponse{Status: a.Status, ItemID: q.ItemID, UserID: q.UserID, TokenID: q.TokenID,
		Position: a.Position, WaitingTotal: a.WaitingTotal, Token: resumed, Notice: it.Notice, Cursor: cursor}
	if !a.ExpiresAt.IsZero() {
		resp.ExpiresAt = a.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	switch a.Status {
	case registration.StatusRejected:
		resp.Message = it.RejectMessage
	case registration.StatusWaiting:
		if secs, ok := registration.ETA(a.Position, registration.PaceOf(st), it, known, now); ok {
			resp.EtaSeconds = &secs
		}
	case registration.StatusAdmitted:
		tok, err := s.admit.IssueAdmission(token.Admission{TokenID: q.TokenID, ItemID: q.ItemID, UserID: q.UserID, Holder: q.Holder, ExpiresAt: a.ExpiresAt})
		if err != nil {
			s.log.Error("sign admission token", zap.Error(err))
			httpserver.Abort(c, registration.Internal("could not sign the admission token"))
			return
		}
		resp.AdmissionToken = tok
	}
	d := registration.PollAfterIdle(a, it.IdleTimeoutSeconds)
	if a.Status == registration.StatusPreQueue {
		resp.DrawAt, resp.InDraw = a.DrawAt.UnixMilli(), a.InDraw
		d = registration.CapForIdle(registration.PreQueuePollAfter(a.DrawAt, now), it.IdleTimeoutSeconds)
	}
	if d > 0 {
		resp.PollAfterMs = d.Milliseconds()
		setRetryAfter(c, int64((d+time.Second-1)/time.Second))
	}
	resp.write(c, http.StatusOK)
}

// readStatus reads where q's registration stands: from memory when an exact
// read of it is recent enough (positions: every, see exactEveryOf), else
// exactly, remembered under gen, the item's view generation read before. A
// read from Redis (the exact one, or the item's motion) is bounded by
// StatusTimeout.
func (s *Server) readStatus(ctx context.Context, q token.Queue, gen view.ItemGen, every time.Duration, look posLook) (line.Status, error) {
	if s.pos == nil {
		ctx, cancel := context.WithTimeout(ctx, s.opt.StatusTimeout)
		defer cancel()
		return s.line.Status(ctx, q.ItemID, q.PlaceKey(), q.TokenID, q.Partition, q.Offset)
	}
	if st, ok := s.pos.status(ctx, q.ItemID, q.TokenID, gen, every, look); ok {
		s.m.readsMemory.Inc()
		return st, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opt.StatusTimeout)
	defer cancel()
	st, err := s.line.Status(ctx, q.ItemID, q.PlaceKey(), q.TokenID, q.Partition, q.Offset)
	if err != nil {
		return st, err
	}
	s.m.readsExact.Inc()
	st.Position = s.pos.remember(q.ItemID, q.TokenID, st, gen)
	return st, nil
}

// resume re-attaches q, a token of a proven user whose place another of the
// user's tokens (live) holds, to that place: it signs a queue token for the
// live one (the same proven user, item and record position: the record of q
// was applied, so every record before it on the partition was too) and reads
// its status. The new token is the answer's "token": the page or app keeps
// it from then on. Only a proven userId keys a place another token can find,
// so nobody resumes a place by typing a name.
func (s *Server) resume(ctx context.Context, q token.Queue, live string, gen view.ItemGen, every time.Duration) (token.Queue, string, line.Status, error) {
	r := q
	r.TokenID = live
	raw, err := s.signer.IssueQueue(r, s.opt.QueueTokenTTL)
	if err != nil {
		return q, "", line.Status{}, fmt.Errorf("sign the resumed queue token: %w", err)
	}
	st, err := s.readStatus(ctx, r, gen, every, posLook{})
	return r, raw, st, err
}

// exactEveryOf is how long an exact read of item it may answer from memory
// when shorter than Options.StatusExactEvery (0: that): for an item that
// releases idle places, half its idleTimeout, so a released place reads
// ABANDONED at its holder's first poll back and the places behind it move up
// within that.
func exactEveryOf(it topics.ItemState) time.Duration {
	if it.IdleTimeoutSeconds > 0 {
		return time.Duration(it.IdleTimeoutSeconds) * time.Second / 2
	}
	return 0
}

func (s *Server) leave(c *gin.Context, pq parsedQueue) {
	q, err := pq.q, pq.err
	if err != nil {
		httpserver.Abort(c, err)
		return
	}
	ev := topics.RegistrationEvent{
		V: topics.Version, Kind: topics.KindLeave, TokenID: q.TokenID, ItemID: q.ItemID, UserID: q.UserID,
		Holder: q.Holder, RequestedAt: s.now().UnixMilli(),
	}
	client := clientMeta(c, c.ClientIP())
	ev.Client = &client
	if _, _, ok := s.produce(c, &ev); !ok {
		return
	}
	if s.pos != nil {
		s.pos.left(q.ItemID, q.TokenID)
	}
	c.JSON(http.StatusAccepted, StatusResponse{Status: registration.StatusLeft, ItemID: q.ItemID, UserID: q.UserID, TokenID: q.TokenID})
}

type metrics struct {
	produce       prometheus.Histogram
	produceErrors prometheus.Counter
	viewRefused   prometheus.Counter
	statusReads   *prometheus.CounterVec
	// The two children of statusReads, resolved once: a read counts without a
	// label lookup.
	readsMemory, readsExact prometheus.Counter
	// cursorBounded counts answers a client's cursor made smaller.
	cursorBounded prometheus.Counter
	guard         *prometheus.CounterVec
	auto          *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		produce: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "waitroom_api_produce_duration_seconds", Help: "Time from produce to broker ack of registration events.",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, 1},
		}),
		produceErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_api_produce_errors_total", Help: "Registration events the broker did not take.",
		}),
	}
	m.viewRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "waitroom_api_view_refused_total", Help: "Requests answered 503 VIEW_REBUILDING while the Redis view was not trusted.",
	})
	m.statusReads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "waitroom_api_status_reads_total", Help: "Status reads of registrations, by source: exact (Redis) or memory (moved by the item's head).",
	}, []string{"source"})
	m.readsMemory, m.readsExact = m.statusReads.WithLabelValues("memory"), m.statusReads.WithLabelValues("exact")
	m.cursorBounded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "waitroom_api_status_cursor_bounded_total", Help: "Status answers whose position the client's cursor lowered (another replica, or this one, told it a smaller one).",
	})
	reg.MustRegister(m.produce, m.produceErrors, m.viewRefused, m.statusReads, m.cursorBounded)
	m.guard = newGuardMetric(reg)
	m.auto = newAutoMetric(reg)
	return m
}
