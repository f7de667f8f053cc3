package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// statusAPI is a Server reading a real redis-server's line, its routes on
// the engine the api serves (httpserver.New: request metrics, recovery),
// served in process (no network): its queue tokens are for
// the item "drop", signed by signer, which remembers rememberedTokens
// verified tokens as Run's does.
type statusAPI struct {
	s      *Server
	engine *gin.Engine
	signer *token.Signer
	line   *queue.Line
}

// staticItems is an item table that never changes.
type staticItems map[string]topics.ItemState

func (m staticItems) Get(item string) (topics.ItemState, bool) { it, ok := m[item]; return it, ok }

// newStatusAPI builds a statusAPI on clock now, its options changed by set.
func newStatusAPI(tb testing.TB, now func() time.Time, set func(*Options)) *statusAPI {
	tb.Helper()
	rds := testenv.StartRedis(tb)
	it := topics.ItemState{V: topics.Version, ItemID: "drop", Name: "drop", Stock: topics.Unlimited, Enabled: true,
		Policy: topics.AdmissionPolicy{RatePerSecond: 50, SessionTTLSeconds: 60}, Version: 1, UpdatedAt: 1}
	l := queue.New(rds.Client())
	if _, err := l.ApplyItem(context.Background(), it); err != nil {
		tb.Fatal(err)
	}
	signer, err := token.NewHMAC([]byte("status-handler-test-key-0123456789"), "k1")
	if err != nil {
		tb.Fatal(err)
	}
	signer = signer.WithClock(now).RememberVerified(rememberedTokens)
	reg := prometheus.NewRegistry()
	opt := Options{StatusExactEvery: time.Minute, CursorKey: StatusCursorKey("status-handler-test"),
		Throttle: NewThrottle(rds.Client(), ThrottleConfig{StatusRate: 5, StatusBurst: 10, Period: time.Second}, reg, zap.NewNop())}
	if set != nil {
		set(&opt)
	}
	s := NewServer(staticItems{"drop": it}, nil, l, signer, nil, opt, reg, zap.NewNop())
	s.now = now
	if s.pos != nil {
		s.pos.now = now
	}
	engine := httpserver.New(zap.NewNop(), prometheus.NewRegistry(), &httpserver.Readiness{})
	s.Routes(engine)
	return &statusAPI{s: s, engine: engine, signer: signer, line: l}
}

// tokens signs n queue tokens for "drop", valid for an hour; with apply,
// their places are added to the line too, as the consumer would.
func (a *statusAPI) tokens(tb testing.TB, n int, apply bool) ([]string, []token.Queue) {
	tb.Helper()
	raws, qs := make([]string, n), make([]token.Queue, n)
	ops := make([]queue.Op, 0, 10_000)
	for i := range n {
		q := token.Queue{TokenID: "TOKEN" + strconv.Itoa(1_000_000+i), ItemID: "drop", UserID: "u" + strconv.Itoa(i),
			Holder: topics.HolderToken, Partition: 0, Offset: int64(i)}
		raw, err := a.signer.IssueQueue(q, time.Hour)
		if err != nil {
			tb.Fatal(err)
		}
		raws[i], qs[i] = raw, q
		ops = append(ops, queue.Op{Kind: queue.OpRegister, ItemID: "drop", TokenID: q.TokenID, UserID: q.PlaceKey(), Partition: q.Partition, Offset: q.Offset})
		if apply && (len(ops) == cap(ops) || i == n-1) {
			if _, err := a.line.Apply(context.Background(), ops); err != nil {
				tb.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	return raws, qs
}

// get serves GET of raw's status, with query (none when empty).
func (a *statusAPI) get(raw, query string) *httptest.ResponseRecorder {
	target := "/api/v1/items/drop/registrations/" + raw
	if query != "" {
		target += "?" + query
	}
	w := httptest.NewRecorder()
	a.engine.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
	return w
}

// discardWriter is a ResponseWriter that keeps the last answer's code and
// body and reuses its header map and buffer.
type discardWriter struct {
	h    http.Header
	code int
	body []byte
}

func (w *discardWriter) Header() http.Header { return w.h }

func (w *discardWriter) Write(p []byte) (int, error) {
	w.body = append(w.body, p...)
	return len(p), nil
}

func (w *discardWriter) WriteHeader(code int) { w.code = code }

func (w *discardWriter) reset() {
	clear(w.h)
	w.code, w.body = http.StatusOK, w.body[:0]
}

// BenchmarkStatusHandler is a status read answered from memory, in process:
// the gin engine with the api's routes serves one GET per read, for n
// waiting tokens read round robin in a still line (1,000: every token
// remembered as verified; 100,000: more than rememberedTokens), with the
// token's status bucket in memory (never empty here), without a cursor and
// with the cursor of the token's last answer sent back (the client's copy of
// it is one of the allocations). The places are remembered exact reads and
// the item's motion is set before the timer, so no read goes to Redis, and
// one untimed pass reads each token once. Its ns/op and allocs/op are the
// router's and the handler's only; BENCHMARKS.md counts its instructions
// under callgrind too.
func BenchmarkStatusHandler(b *testing.B) {
	for _, n := range []int{1000, 100_000} {
		for _, withCursor := range []bool{false, true} {
			name := "tokens=" + strconv.Itoa(n) + "/cursor=" + strconv.FormatBool(withCursor)
			b.Run(name, func(b *testing.B) { benchStatusHandler(b, n, withCursor) })
		}
	}
}

func benchStatusHandler(b *testing.B, n int, withCursor bool) {
	a := newStatusAPI(b, time.Now, func(o *Options) {
		o.StatusExactEvery, o.MotionFresh = time.Hour, time.Hour
		o.Throttle = NewThrottle(nil, ThrottleConfig{StatusRate: 1e9, StatusBurst: 1e9, Period: time.Second}, prometheus.NewRegistry(), zap.NewNop())
	})
	raws, qs := a.tokens(b, n, false)
	gen := view.ItemGen{}
	for i, q := range qs { // seqs far above the head: the line never reaches them
		st := line.Status{State: line.Waiting, Seq: int64(1_000_000 + i), Position: int64(1_000_000 + i), WaitingTotal: 2_000_000}
		a.s.pos.remember(q.ItemID, q.TokenID, st, gen)
	}
	a.s.pos.itemMotion("drop").last.Store(&motionSnap{m: line.Motion{WaitingTotal: 2_000_000}, at: time.Now(), gen: gen})
	reqs := make([]*http.Request, n)
	for i, raw := range raws {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/api/v1/items/drop/registrations/"+raw, nil)
	}
	w := &discardWriter{h: http.Header{}}
	read := func(i int) {
		w.reset()
		a.engine.ServeHTTP(w, reqs[i])
		if w.code != http.StatusOK {
			b.Fatalf("read %d: %d %s", i, w.code, w.body)
		}
		if withCursor {
			at := bytes.Index(w.body, []byte(`"cursor":"`))
			if at < 0 {
				b.Fatalf("read %d: no cursor in %s", i, w.body)
			}
			c := w.body[at+len(`"cursor":"`):]
			reqs[i].URL.RawQuery = "cursor=" + string(c[:bytes.IndexByte(c, '"')])
		}
	}
	for i := range n {
		read(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		read(i % n)
	}
}
