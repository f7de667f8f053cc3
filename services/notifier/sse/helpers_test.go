package sse_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// world is one test's Redis, Kafka, line and token keys.
type world struct {
	t       testing.TB
	redis   *testenv.RedisServer
	rdb     *redis.Client
	brokers []string
	prod    *kgo.Client
	line    *queue.Line
	signer  *token.Signer // queue tokens (the dev HMAC key, as the notifier's default)
	admit   *token.Signer // admission tokens (the dev Ed25519 key)
	version map[string]int64
	offsets map[string]int64
	http    *http.Client
	// produced is, per event the stand-in leader published, how long after
	// its time (At) the produce was acknowledged (appended by runLeader only).
	produced []time.Duration
}

func newWorld(t testing.TB) *world {
	w := &world{t: t, redis: testenv.StartRedis(t), brokers: testenv.Kafka(t, 3),
		version: map[string]int64{}, offsets: map[string]int64{}}
	w.rdb = w.redis.Client()
	var err error
	w.prod, err = kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.ProducerLinger(0))
	require.NoError(t, err)
	t.Cleanup(w.prod.Close)
	w.line = queue.New(w.rdb)
	// The consumer marks the view ready once it has rebuilt it; here nothing was lost.
	require.NoError(t, view.SetReady(context.Background(), w.rdb, "test", nil, time.Now()))
	w.signer, err = token.New(token.HS256, registration.DevTokenKey, "k1")
	require.NoError(t, err)
	w.admit, err = token.New(token.EdDSA, registration.DevAdmissionKey, "a1")
	require.NoError(t, err)
	tr := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 2000, IdleConnTimeout: time.Minute,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	w.http = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return w
}

// setItem publishes an item's state to waitroom.items (the notifier's item
// cache) and applies it to Redis (what the consumer does), with a new version.
func (w *world) setItem(item string, stock int64, enabled bool, p topics.AdmissionPolicy) {
	w.t.Helper()
	w.setState(topics.ItemState{V: topics.Version, ItemID: item, Name: item, Stock: stock, Enabled: enabled, Policy: p})
}

// setState publishes st as setItem does, with the next version.
func (w *world) setState(st topics.ItemState) {
	w.t.Helper()
	w.version[st.ItemID]++
	st.Version, st.UpdatedAt = w.version[st.ItemID], time.Now().UnixMilli()
	item := st.ItemID
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(w.t, w.prod.ProduceSync(ctx, &kgo.Record{Topic: topics.Items, Key: []byte(item), Value: topics.Encode(&st)}).FirstErr())
	_, err := w.line.ApplyItem(ctx, st)
	require.NoError(w.t, err)
}

// reg is one registration: its tokenId, user and signed queue token.
type reg struct {
	TokenID, UserID, Token string
	Offset                 int64
}

// register puts n people in item's line (as the consumer would) and returns
// them in line order with their queue tokens.
func (w *world) register(item string, n int) []reg {
	w.t.Helper()
	out := make([]reg, n)
	ops := make([]queue.Op, n)
	for i := range n {
		off := w.offsets[item]
		w.offsets[item]++
		r := reg{TokenID: fmt.Sprintf("%s-t%05d", item, off), UserID: fmt.Sprintf("u%05d", off), Offset: off}
		var err error
		r.Token, err = w.signer.IssueQueue(token.Queue{TokenID: r.TokenID, ItemID: item, UserID: r.UserID, Offset: off}, time.Hour)
		require.NoError(w.t, err)
		out[i] = r
		ops[i] = queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: r.TokenID, UserID: r.UserID, Offset: off}
	}
	for lo := 0; lo < n; lo += 2000 {
		_, err := w.line.Apply(context.Background(), ops[lo:min(lo+2000, n)])
		require.NoError(w.t, err)
	}
	return out
}

// runLeader stands in for the scheduler, a service the notifier's tests may
// not import: every tick it promotes each active item (queue.Line, the same
// Lua script the scheduler runs) and publishes what changed to
// waitroom.admissions, as the scheduler does, until ctx ends.
func (w *world) runLeader(ctx context.Context, tick time.Duration) {
	const epoch = 1
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		items, err := w.line.ActiveItems(ctx)
		if err != nil || len(items) == 0 {
			continue
		}
		now := time.Now()
		ticks, errs, err := w.line.PromoteMany(ctx, items, epoch, now, time.Second)
		if err != nil {
			continue
		}
		for i, tk := range ticks {
			if errs[i] != nil || (len(tk.Unpublished) == 0 && tk.Expired == 0) {
				continue
			}
			w.publishTick(ctx, epoch, now, items[i], tk)
		}
	}
}

// expiries reads each token's admission expiry from the admitted set, as the
// scheduler does for its events (0: no longer admitted; nil on an error).
func (w *world) expiries(ctx context.Context, item string, tokens []string) []int64 {
	if len(tokens) == 0 {
		return nil
	}
	v, err := w.rdb.ZMScore(ctx, queue.KeysFor(item).Admitted, tokens...).Result()
	if err != nil {
		return nil
	}
	out := make([]int64, len(v))
	for i, e := range v {
		out[i] = int64(e)
	}
	return out
}

// publishTick publishes one item's tick as the scheduler does: events under
// the message size, page by page, each page acknowledged once it is out.
func (w *world) publishTick(ctx context.Context, epoch int64, now time.Time, item string, tk queue.Tick) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	page, sent := tk.Unpublished, int64(0)
	for {
		ev := topics.AdmissionEvent{V: topics.Version, ItemID: item, Admitted: page, ExpiresAt: w.expiries(pctx, item, page),
			Head: tk.Head, Waiting: tk.Waiting, Active: tk.Active, Epoch: epoch, At: now.UnixMilli()}
		var recs []*kgo.Record
		for _, part := range topics.SplitAdmission(ev, topics.MaxAdmissionEventBytes) {
			recs = append(recs, &kgo.Record{Topic: topics.Admissions, Key: []byte(item), Value: topics.Encode(&part)})
		}
		if w.prod.ProduceSync(pctx, recs...).FirstErr() != nil {
			return
		}
		w.produced = append(w.produced, time.Since(time.UnixMilli(ev.At)))
		if len(page) == 0 {
			return
		}
		if w.line.AckPublished(pctx, epoch, []string{item}, []int{len(page)}) != nil {
			return
		}
		if sent += int64(len(page)); sent >= tk.UnpublishedTotal {
			return
		}
		var err error
		if page, err = w.line.Unpublished(pctx, item, queue.UnpublishedPage); err != nil || len(page) == 0 {
			return
		}
	}
}

// scheduler runs the stand-in leader until the test ends.
func (w *world) scheduler(tick time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.runLeader(ctx, tick) }()
	w.t.Cleanup(func() { cancel(); <-done })
}

// notifier is one running notifier replica.
type notifier struct {
	URL  string
	stop func()
}

// notifier starts a notifier replica with heartbeat hb and refresh (0: the default).
func (w *world) notifier(hb, refresh time.Duration) *notifier {
	w.t.Helper()
	return w.notifierWith(hb, refresh, nil)
}

// notifierWith starts a notifier replica as notifier does, its config
// changed by set (nil: none) before it starts.
func (w *world) notifierWith(hb, refresh time.Duration, set func(*sse.Config)) *notifier {
	w.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(w.t, err)
	cfg := sse.Config{
		TokenConfig: registration.TokenConfig{TokenAlg: token.HS256, TokenKID: "k1", AdmissionKID: "a1", DevKeys: true},
		Heartbeat:   hb, Retry: 3 * time.Second, WriteTimeout: 5 * time.Second, Refresh: refresh, IdleRefresh: time.Minute,
		Kafka: config.Kafka{Brokers: w.brokers, ClientID: "test"},
		Redis: config.Redis{Addr: w.redis.Addr, PoolSize: 64},
		HTTP:  config.HTTP{ShutdownTimeout: 5 * time.Second},
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = 5 * time.Second
	}
	if set != nil {
		set(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := &httpserver.Readiness{}
	done := make(chan error, 1)
	var log *zap.Logger = zap.NewNop()
	if tt, ok := w.t.(*testing.T); ok && testing.Verbose() {
		log = zaptest.NewLogger(tt, zaptest.Level(zap.WarnLevel))
	}
	go func() { done <- sse.Run(ctx, cfg, ln, log, ready) }()
	n := &notifier{URL: "http://" + ln.Addr().String()}
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(w.t, err)
			case <-time.After(15 * time.Second):
				w.t.Error("notifier did not stop within 15 s")
			}
		})
	}
	w.t.Cleanup(n.stop)
	deadline := time.Now().Add(30 * time.Second)
	for !ready.Healthy() {
		require.True(w.t, time.Now().Before(deadline), "notifier not ready in 30 s")
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// serve serves a Server with opt on an engine of the test's (no Kafka: the
// test feeds the hub it returns) until ctx ends or the test does.
func (w *world) serve(ctx context.Context, opt sse.Options) (*sse.Hub, *notifier) {
	hub := sse.NewHub(nil)
	reg := prometheus.NewRegistry()
	srv := sse.NewServer(hub, w.rdb, nil, w.signer, w.admit, opt, sse.NewMetrics(reg, hub), zap.NewNop())
	engine := httpserver.New(zap.NewNop(), reg, &httpserver.Readiness{})
	srv.Routes(engine)
	ts := httptest.NewServer(engine)
	w.t.Cleanup(ts.Close)
	go hub.Run(ctx, srv.Options().Heartbeat, time.Second)
	return hub, &notifier{URL: ts.URL}
}

func (n *notifier) eventsURL(item, tok string) string {
	return n.URL + "/api/v1/items/" + item + "/registrations/" + tok + "/events"
}

// metric reads one un-labelled sample (or name{labels}) from /metrics.
func (w *world) metric(n *notifier, name string) float64 {
	w.t.Helper()
	resp, err := w.http.Get(n.URL + "/metrics")
	require.NoError(w.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(w.t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(l[len(name):]), 64)
			require.NoError(w.t, err)
			return v
		}
	}
	return 0
}

// event is one SSE event as a client saw it.
type event struct {
	ID    string
	Type  string
	Data  string
	At    time.Time // when it was read
	Retry string
}

// idNum is the progress in the event's id (before its cursor, if any).
func (e event) idNum() int64 { n, _ := strconv.ParseInt(e.progress(), 10, 64); return n }

// progress is the id without its cursor.
func (e event) progress() string { p, _, _ := strings.Cut(e.ID, "."); return p }

func (e event) position(t testing.TB) sse.Position {
	t.Helper()
	var p sse.Position
	require.NoError(t, json.Unmarshal([]byte(e.Data), &p), e.Data)
	return p
}

// sseConn is a plain net/http SSE reader.
type sseConn struct {
	Resp  *http.Response
	r     *bufio.Reader
	Retry string
	Pings int
}

// open opens a stream; hdr adds request headers. It returns the response as
// is when the status is not 200 (the caller reads the error body).
func (w *world) open(ctx context.Context, url string, hdr map[string]string) (*sseConn, error) {
	return openWith(ctx, w.http, url, hdr)
}

// openWith opens a stream as open does, with client.
func openWith(ctx context.Context, client *http.Client, url string, hdr map[string]string) (*sseConn, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	return &sseConn{Resp: resp, r: bufio.NewReaderSize(resp.Body, 1024)}, nil
}

// next reads the next event (skipping comments, which count as pings, and the
// retry field); io.EOF when the server ended the stream.
func (c *sseConn) next() (event, error) {
	var ev event
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.Type != "" || ev.Data != "" {
				ev.At = time.Now()
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			c.Pings++
		case strings.HasPrefix(line, "retry: "):
			c.Retry = line[7:]
		case strings.HasPrefix(line, "id: "):
			ev.ID = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.Type = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.Data = line[6:]
		default:
			return ev, fmt.Errorf("unexpected line %q", line)
		}
	}
}

func (c *sseConn) close() { c.Resp.Body.Close() }

// h2cTransport speaks cleartext HTTP/2 alone (prior knowledge), as a front
// door does to its upstream; conf, when not nil, sets its HTTP/2 settings.
func h2cTransport(conf *http.HTTP2Config) *http.Transport {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: p, HTTP2: conf, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
}

// h2cClient is a client on h2cTransport(conf), closed when the test ends.
func h2cClient(t testing.TB, conf *http.HTTP2Config) *http.Client {
	tr := h2cTransport(conf)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// all reads events until the stream ends (or ctx's deadline, by the request).
func (c *sseConn) all() ([]event, error) {
	var out []event
	for {
		ev, err := c.next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}
