// Package admin is the operator API the scheduler hosts on its own port: read
// every item with its line's counters, change an item's admission policy or
// state (recorded on waitroom.items first, then applied to Redis), and list
// and replay the dead-letter topics.
package admin

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/itempatch"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	wrview "github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Prefix is where Routes mounts the admin API.
const Prefix = "/internal/admin/v1"

const (
	maxBodyBytes = 4 << 10
	// maxItemBodyBytes lets an item's change carry its page templates, the
	// one for every language and one per language (topics.MaxTemplate each,
	// JSON-escaped).
	maxItemBodyBytes = 4*topics.MaxTemplate*(1+topics.MaxTemplateLanguages) + maxBodyBytes
	callTimeout      = 5 * time.Second // per Redis or Kafka call
)

// Items is the in-memory view of waitroom.items (*itemcache.Cache).
type Items interface {
	Get(item string) (topics.ItemState, bool)
	All() map[string]topics.ItemState
}

// Producer sends records to Kafka and waits for the broker's ack (*kgo.Client).
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
}

// Server serves the admin routes.
type Server struct {
	line     *queue.Line
	items    Items
	prod     Producer
	hasToken bool
	tokenSum [sha256.Size]byte
	log      *zap.Logger
	now      func() time.Time

	// mu serializes this replica's writes, so two of them never read the same
	// version and publish two different states under one version number.
	mu sync.Mutex

	// The DLQ routes' readers, set by WithKafka; replaying lets one replay run at a time.
	dlqs      *dlq.Inspector
	replayer  *dlq.Replayer
	replaying sync.Mutex

	leading  func() bool // this replica leads (WithLeader), for the console
	sessions *sessions   // the console's sign-ins (WithConsole); nil: refused

	blocks    Blocks             // WithBlocks
	ops       *Operations        // WithOperations: DLQ sizes, lag, shard leaders for the console
	view      *wrview.Watcher    // WithView: the items being rebuilt, for the console
	bypassKey ed25519.PrivateKey // signs bypass codes (WithBypass); nil: off
	drawKey   []byte             // WithDrawKey: makes the draw commitments
}

// New returns a Server that accepts requests bearing token; an empty token
// refuses every request.
func New(line *queue.Line, items Items, prod Producer, token string, log *zap.Logger) *Server {
	return &Server{
		line: line, items: items, prod: prod, log: log, now: time.Now,
		hasToken: token != "", tokenSum: sha256.Sum256([]byte(token)),
	}
}

// Routes mounts the admin API under Prefix on r, every route behind the
// bearer token.
func (s *Server) Routes(r gin.IRouter) {
	g := r.Group(Prefix, s.auth)
	g.GET("/items", s.listItems)
	g.GET("/items/:itemId", s.getItem)
	g.POST("/items/:itemId", s.updateItem)
	g.PUT("/items/:itemId/admission", s.updateAdmission)
	g.POST("/items/:itemId/bypass", s.issueBypass)
	g.GET("/items/:itemId/bypass", s.bypassUses)
	g.GET("/stats", s.stats)
	g.GET("/dlq", s.listDLQ)
	g.GET("/dlq/:partition/:offset", s.showDLQ)
	g.POST("/dlq/replay", s.replayDLQ)
	s.blockRoutes(g)
	s.consoleRoutes(r)
}

// auth lets a request through only with the configured bearer token. Both
// sides are hashed first so the comparison takes the same time whatever the
// length of the guess.
func (s *Server) auth(c *gin.Context) {
	bearer := httpserver.Bearer(c.GetHeader("Authorization"))
	ok := s.hasToken && bearer != ""
	if ok {
		sum := sha256.Sum256([]byte(bearer))
		ok = subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) == 1
	}
	// The console's calls carry its session cookie instead, and a header no
	// other site's form or script can send without our consent (CSRF).
	if !ok && bearer == "" && c.GetHeader(consoleHeader) == "1" {
		var err error
		if ok, err = s.session(c); err != nil {
			s.unavailable(c, "check console session", "", err)
			return
		}
	}
	if !ok {
		c.Header("WWW-Authenticate", `Bearer realm="waitroom-admin"`)
		httpserver.Abort(c, registration.Refuse(http.StatusUnauthorized, "UNAUTHORIZED", "a valid admin bearer token is required"))
		return
	}
	c.Next()
}

// ItemView is an item's state with its line's counters.
type ItemView struct {
	ItemID             string                 `json:"itemId"`
	Name               string                 `json:"name"`
	Stock              int64                  `json:"stock"`
	Enabled            bool                   `json:"enabled"`
	Paused             bool                   `json:"paused"` // nobody is admitted: policy.paused, or ratePerSecond 0
	Policy             topics.AdmissionPolicy `json:"policy"`
	Mode               string                 `json:"mode"` // fifo, passthrough, reject, random or auto
	RejectMessage      string                 `json:"rejectMessage,omitempty"`
	Notice             string                 `json:"notice,omitempty"`
	Template           string                 `json:"template,omitempty"`
	Templates          map[string]string      `json:"templates,omitempty"` // by language
	Version            int64                  `json:"version"`
	UpdatedAt          int64                  `json:"updatedAt"` // unix milliseconds
	Waiting            int64                  `json:"waiting"`
	Admitted           int64                  `json:"admitted"` // admissions not yet expired
	Head               int64                  `json:"head"`     // highest seq admitted so far
	Seq                int64                  `json:"seq"`      // registrations accepted so far
	AdmittedLastMinute int64                  `json:"admittedLastMinute"`
	Active             bool                   `json:"active"` // in the scheduler's registry of live lines
	// The console's fields (console.go): the ETA of the last in line
	// (0 while nobody waits or admission is paused), the stats hash's
	// counters (0 when never counted), and the schedule and guards of the item.
	EtaLastSeconds int64 `json:"etaLastSeconds,omitempty"`
	Abandoned      int64 `json:"abandoned"`
	// Refused counts the registrations the api replicas refused (reject
	// mode, blocks, throttles, proof-of-work...), RefusedBy the same by
	// error code ("BLOCKED 2, RATE_LIMITED 40"); PreQueued how many wait
	// for a draw (pooled or late).
	Refused            int64  `json:"refused"`
	RefusedBy          string `json:"refusedBy,omitempty"`
	PreQueued          int64  `json:"preQueued"`
	IdleTimeoutSeconds int64  `json:"idleTimeoutSeconds,omitempty"`
	PowDifficulty      int    `json:"powDifficulty,omitempty"`
	// The scheduled sale and random mode's draws (see pkg/domain/draw).
	OpensAt           int64  `json:"opensAt,omitempty"`
	DrawWindowSeconds int64  `json:"drawWindowSeconds,omitempty"`
	DrawCommit        string `json:"drawCommit,omitempty"`
	DrawRounds        int64  `json:"drawRounds,omitempty"`
	DrawSalt          string `json:"drawSalt,omitempty"`
	// Steering is the steering controller's last decision for the item
	// (docs/steering.md): what applies beside the policy's bounds, and why.
	Steering *SteeringView `json:"steering,omitempty"`
}

// SteeringView is an item's steering as Redis holds it.
type SteeringView struct {
	Applies bool    `json:"applies"` // promote admits within rate and cap
	Rate    float64 `json:"rate,omitempty"`
	// HeadLimit: nobody from the line is admitted past this seq.
	HeadLimit int64                 `json:"headLimit,omitempty"`
	At        int64                 `json:"at"` // unix ms of the last decision
	Last      *topics.SteerDecision `json:"last"`
}

// ItemsResponse is the answer to GET .../items.
type ItemsResponse struct {
	Items []ItemView `json:"items"`
}

// Totals is the answer to GET .../stats: sums over every item of the cache.
type Totals struct {
	Items              int   `json:"items"`
	Waiting            int64 `json:"waiting"`
	Admitted           int64 `json:"admitted"`
	AdmittedLastMinute int64 `json:"admittedLastMinute"`
	Registered         int64 `json:"registered"` // sum of seq
}

func (s *Server) listItems(c *gin.Context) {
	views, item, err := s.itemViews(c.Request.Context())
	if err != nil {
		s.unavailable(c, "read item", item, err)
		return
	}
	c.JSON(http.StatusOK, ItemsResponse{Items: views})
}

// itemViews reads every item of the cache with its line's counters, in id
// order; on an error it names the item it was reading ("" for the registry).
func (s *Server) itemViews(ctx context.Context) ([]ItemView, string, error) {
	all := s.items.All()
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	reg, err := s.registry(rctx)
	cancel()
	if err != nil {
		return nil, "", err
	}
	out := make([]ItemView, 0, len(all))
	for _, id := range slices.Sorted(maps.Keys(all)) {
		v, _, err := s.lookup(ctx, id, reg)
		if err != nil {
			return nil, id, err
		}
		out = append(out, v)
	}
	return out, "", nil
}

func (s *Server) getItem(c *gin.Context) {
	item, ok := itemID(c)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), callTimeout)
	defer cancel()
	reg, err := s.registry(ctx)
	if err != nil {
		s.unavailable(c, "read registry", item, err)
		return
	}
	v, found, err := s.lookup(c.Request.Context(), item, reg)
	switch {
	case err != nil:
		s.unavailable(c, "read item", item, err)
	case !found:
		httpserver.Abort(c, registration.Refuse(http.StatusNotFound, "ITEM_NOT_FOUND", "no item "+item))
	default:
		c.JSON(http.StatusOK, v)
	}
}

func (s *Server) stats(c *gin.Context) {
	all := s.items.All()
	t := Totals{Items: len(all)}
	for id := range all {
		ctx, cancel := context.WithTimeout(c.Request.Context(), callTimeout)
		st, err := s.line.Stats(ctx, id)
		cancel()
		if err != nil {
			s.unavailable(c, "read stats", id, err)
			return
		}
		t.Waiting += st.Waiting
		t.Admitted += st.Admitted
		t.AdmittedLastMinute += st.AdmittedLastMinute
		t.Registered += st.Seq
	}
	c.JSON(http.StatusOK, t)
}

func (s *Server) updateAdmission(c *gin.Context) {
	item, ok := itemID(c)
	if !ok {
		return
	}
	var req AdmissionRequest
	if !decodeBody(c, &req) {
		return
	}
	s.write(c, item, false, func(st topics.ItemState) (topics.ItemState, *RequestError) {
		p, rerr := req.Apply(st.Policy)
		st.Policy = p
		return st, rerr
	})
}

func (s *Server) updateItem(c *gin.Context) {
	item, ok := itemID(c)
	if !ok {
		return
	}
	var req ItemRequest
	if !decodeBodyMax(c, &req, maxItemBodyBytes) {
		return
	}
	s.write(c, item, true, req.Apply)
}

// write changes item with change and answers the new view. The new state is
// published to waitroom.items first (Kafka is the record), then applied to
// Redis so the scheduler's next tick uses it; the consumer's later apply of
// the same version is a no-op. create allows an item nobody knows yet.
func (s *Server) write(c *gin.Context, item string, create bool, change func(topics.ItemState) (topics.ItemState, *RequestError)) {
	s.mu.Lock()
	defer s.mu.Unlock()

	ctx, cancel := context.WithTimeout(c.Request.Context(), callTimeout)
	cur, found, err := s.current(ctx, item)
	cancel()
	switch {
	case err != nil:
		s.unavailable(c, "read item", item, err)
		return
	case !found && !create:
		httpserver.Abort(c, registration.Refuse(http.StatusNotFound, "ITEM_NOT_FOUND", "no item "+item))
		return
	case !found:
		cur = itempatch.NewItem(item)
	}
	next, rerr := change(cur)
	if rerr != nil {
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, rerr.Code, rerr.Message))
		return
	}
	next.V, next.ItemID, next.Version, next.UpdatedAt = topics.Version, item, cur.Version+1, s.now().UnixMilli()
	ctx, cancel = context.WithTimeout(c.Request.Context(), callTimeout)
	next, code, rerr := s.commit(ctx, next)
	cancel()
	if rerr != nil {
		httpserver.Abort(c, registration.Refuse(code, rerr.Code, rerr.Message))
		return
	}
	if err := next.Validate(); err != nil {
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_ITEM", strings.TrimPrefix(err.Error(), topics.ErrInvalid.Error()+": ")))
		return
	}

	ctx, cancel = context.WithTimeout(c.Request.Context(), callTimeout)
	err = s.prod.ProduceSync(ctx, &kgo.Record{Topic: topics.Items, Key: []byte(item), Value: topics.Encode(&next)}).FirstErr()
	cancel()
	if err != nil {
		s.log.Warn("admin: publish item state", zap.String("item", item), zap.Int64("version", next.Version), zap.Error(err))
		c.Header("Retry-After", "1")
		httpserver.Abort(c, registration.Refuse(http.StatusServiceUnavailable, "UNAVAILABLE", "could not publish to "+topics.Items+"; nothing changed, retry shortly"))
		return
	}

	// Published: finish the Redis write even if the client hangs up now.
	ctx, cancel = context.WithTimeout(context.WithoutCancel(c.Request.Context()), callTimeout)
	defer cancel()
	applied, err := s.line.ApplyItem(ctx, next)
	if err != nil {
		s.log.Warn("admin: apply item state", zap.String("item", item), zap.Int64("version", next.Version), zap.Error(err))
		c.Header("Retry-After", "1")
		httpserver.Abort(c, registration.Refuse(http.StatusServiceUnavailable, "UNAVAILABLE",
			"recorded as version "+strconv.FormatInt(next.Version, 10)+" on "+topics.Items+" but Redis did not take it yet; the consumer will apply it"))

		return
	}
	if !applied { // the consumer got there first (fine), or another writer took this version
		stored, _, err := s.line.Item(ctx, item)
		if err == nil && !sameState(stored, next) {
			s.log.Warn("admin: concurrent item update", zap.String("item", item), zap.Int64("version", next.Version), zap.Int64("stored", stored.Version))
			httpserver.Abort(c, registration.Refuse(http.StatusConflict, "CONFLICT",
				"the item changed concurrently (now version "+strconv.FormatInt(stored.Version, 10)+"); read it again and retry"))

			return
		}
	}
	s.log.Info("admin: item updated", zap.String("item", item), zap.Int64("version", next.Version),
		zap.String("name", next.Name), zap.Int64("stock", next.Stock), zap.Bool("enabled", next.Enabled),
		zap.Float64("ratePerSecond", next.Policy.RatePerSecond), zap.Int64("maxActive", next.Policy.MaxActive),
		zap.Int64("sessionTTLSeconds", next.Policy.SessionTTLSeconds), zap.Bool("paused", next.Policy.Paused))
	s.answerItem(ctx, c, item, next)
}

// answerItem answers the view of item in state st: its line's registry
// entry and stats with it.
func (s *Server) answerItem(ctx context.Context, c *gin.Context, item string, st topics.ItemState) {
	reg, err := s.registry(ctx)
	if err != nil {
		s.unavailable(c, "read registry", item, err)
		return
	}
	stats, err := s.line.Stats(ctx, item)
	if err != nil {
		s.unavailable(c, "read stats", item, err)
		return
	}
	c.JSON(http.StatusOK, view(st, stats, reg[item]))
}

// sameState compares two states as Redis holds them: fifo, given or not,
// reads back as the default mode (an operator who sets "fifo" while the
// consumer applies the same version first is not a conflict); no pages by
// language and none given read the same.
func sameState(a, b topics.ItemState) bool {
	if !maps.Equal(a.Templates, b.Templates) {
		return false
	}
	a.Mode, b.Mode = a.ModeOf(), b.ModeOf()
	a.Templates, b.Templates = nil, nil
	return reflect.DeepEqual(a, b)
}

// current returns the newest state of item that the cache or Redis holds:
// Redis is ahead of the cache right after an admin write, the cache ahead of
// Redis while the consumer lags.
func (s *Server) current(ctx context.Context, item string) (topics.ItemState, bool, error) {
	st, ok := s.items.Get(item)
	rs, rok, err := s.line.Item(ctx, item)
	if err != nil {
		return st, false, err
	}
	if rok && (!ok || rs.Version > st.Version) {
		return rs, true, nil
	}
	return st, ok, nil
}

// lookup reads item's newest state and counters; found is false when neither
// the cache nor Redis knows the item.
func (s *Server) lookup(ctx context.Context, item string, reg map[string]bool) (ItemView, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cur, found, err := s.current(ctx, item)
	if err != nil || !found {
		return ItemView{}, false, err
	}
	st, err := s.line.Stats(ctx, item)
	if err != nil {
		return ItemView{}, false, err
	}
	v := view(cur, st, reg[item])
	if err := s.addCounters(ctx, &v, cur, st); err != nil {
		return ItemView{}, false, err
	}
	return v, true, nil
}

// registry returns the set of items with a live line.
func (s *Server) registry(ctx context.Context) (map[string]bool, error) {
	ids, err := s.line.ActiveItems(ctx)
	if err != nil {
		return nil, err
	}
	reg := make(map[string]bool, len(ids))
	for _, id := range ids {
		reg[id] = true
	}
	return reg, nil
}

func view(it topics.ItemState, st queue.Stats, active bool) ItemView {
	return ItemView{
		ItemID: it.ItemID, Name: it.Name, Stock: it.Stock, Enabled: it.Enabled, Paused: !it.Policy.Admitting(),
		Policy: it.Policy, Mode: it.ModeOf(), RejectMessage: it.RejectMessage, Notice: it.Notice, Template: it.Template, Templates: it.Templates, Version: it.Version, UpdatedAt: it.UpdatedAt,
		Waiting: st.Waiting, Admitted: st.Admitted, Head: st.Head, Seq: st.Seq, AdmittedLastMinute: st.AdmittedLastMinute,
		Active:  active,
		OpensAt: it.OpensAt, DrawWindowSeconds: it.DrawWindowSeconds, DrawCommit: it.DrawCommit, DrawRounds: it.DrawRounds, DrawSalt: it.DrawSalt,
	}
}

func (s *Server) unavailable(c *gin.Context, what, item string, err error) {
	s.log.Warn("admin: "+what, zap.String("item", item), zap.Error(err))
	c.Header("Retry-After", "1")
	httpserver.Abort(c, registration.Refuse(http.StatusServiceUnavailable, "UNAVAILABLE", "Redis cannot be read right now; retry shortly"))
}

// itemID returns the path's itemId; on a bad one it has answered 400.
func itemID(c *gin.Context) (string, bool) {
	item := c.Param("itemId")
	if p := topics.ItemIDProblem(item); p != "" {
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_ITEM_ID", p))
		return "", false
	}
	return item, true
}

// decodeBody reads at most maxBodyBytes and decodes them strictly into v; on
// failure it has answered 400 or 413.
func decodeBody(c *gin.Context, v any) bool { return decodeBodyMax(c, v, maxBodyBytes) }

// decodeBodyMax is decodeBody with a limit of max bytes.
func decodeBodyMax(c *gin.Context, v any, max int64) bool {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			httpserver.Abort(c, registration.Refuse(http.StatusRequestEntityTooLarge, "BODY_TOO_LARGE", "request body is larger than "+strconv.FormatInt(max, 10)+" bytes"))
			return false
		}
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_BODY", "reading request body: "+err.Error()))
		return false
	}
	if rerr := decodeStrict(body, v); rerr != nil {
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, rerr.Code, rerr.Message))
		return false
	}
	return true
}
