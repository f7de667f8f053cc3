package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

const (
	testKey      = "api-test-hmac-key-0123456789abcdef!!"
	admissionKey = "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=" // base64 Ed25519 seed
)

// api is one running api over a kfake cluster and a redis-server of its own.
// The tests stand in for the consumer and the scheduler through queue.Line
// (a service's tests may not import another service).
type api struct {
	t      *testing.T
	url    string
	http   *http.Client
	line   *queue.Line
	rdb    *redis.Client
	signer *token.Signer
	// brokers, cfg and stop let a test restart the api on the same record.
	brokers []string
	cfg     httpapi.Config
	stop    func()
}

func item(id string) topics.ItemState {
	return topics.ItemState{V: topics.Version, ItemID: id, Name: id, Stock: topics.Unlimited, Enabled: true,
		Policy: topics.AdmissionPolicy{RatePerSecond: 50, MaxActive: 0, SessionTTLSeconds: 60}, Version: 1, UpdatedAt: 1}
}

// newAPI publishes items to waitroom.items and starts the api, built from its
// own config defaults, and waits until it is ready.
func newAPI(t *testing.T, items ...topics.ItemState) *api {
	t.Helper()
	return newAPIWith(t, nil, items...)
}

// newAPIWith is newAPI with the config changed by set (nil: the defaults).
func newAPIWith(t *testing.T, set func(*httpapi.Config), items ...topics.ItemState) *api {
	t.Helper()
	brokers := testenv.Kafka(t, 3)
	rds := testenv.StartRedis(t)
	kcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	require.NoError(t, err)
	defer kcl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, it := range items {
		require.NoError(t, kcl.ProduceSync(ctx, &kgo.Record{Topic: topics.Items, Key: []byte(it.ItemID), Value: topics.Encode(&it)}).FirstErr())
	}
	line := queue.New(rds.Client())
	// The consumer marks the view ready once it has (re)built it; here nothing was lost.
	require.NoError(t, view.SetReady(ctx, rds.Client(), "test", nil, time.Now()))
	for _, it := range items {
		_, err := line.ApplyItem(ctx, it)
		require.NoError(t, err)
	}

	cfg, err := config.Defaults[httpapi.Config]()
	require.NoError(t, err)
	cfg.Kafka.Brokers, cfg.Redis.Addr = brokers, rds.Addr
	cfg.TokenKey, cfg.AdmissionKey = testKey, admissionKey
	if set != nil {
		set(&cfg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rctx, stop := context.WithCancel(context.Background())
	ready := &httpserver.Readiness{}
	done := make(chan error, 1)
	go func() { done <- httpapi.Run(rctx, cfg, ln, zaptest.NewLogger(t).Named("api"), ready) }()
	var once sync.Once
	halt := func() {
		once.Do(func() {
			stop()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(halt)
	require.Eventually(t, ready.Healthy, 30*time.Second, 10*time.Millisecond, "api not ready")
	signer, err := token.New(token.HS256, testKey, "k1")
	require.NoError(t, err)
	return &api{t: t, url: "http://" + ln.Addr().String(), line: line, rdb: rds.Client(), signer: signer,
		http: &http.Client{Timeout: 10 * time.Second}, brokers: brokers, cfg: cfg, stop: halt}
}

// twin starts another api on the same record (Kafka and Redis), its config
// changed by set (nil: the same), and waits until it is ready.
func (s *api) twin(set func(*httpapi.Config)) *api {
	s.t.Helper()
	cfg := s.cfg
	if set != nil {
		set(&cfg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(s.t, err)
	ctx, stop := context.WithCancel(context.Background())
	ready := &httpserver.Readiness{}
	done := make(chan error, 1)
	go func() { done <- httpapi.Run(ctx, cfg, ln, zaptest.NewLogger(s.t).Named("api2"), ready) }()
	s.t.Cleanup(func() { stop(); require.NoError(s.t, <-done) })
	require.Eventually(s.t, ready.Healthy, 30*time.Second, 10*time.Millisecond, "api twin not ready")
	n := *s
	n.url, n.cfg = "http://"+ln.Addr().String(), cfg
	return &n
}

type answer struct {
	Code   int
	Body   []byte
	Header http.Header
}

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(a.Body, v), "body %s", a.Body)
}

func (a answer) errCode(t *testing.T) string {
	t.Helper()
	var body httpserver.ErrorBody
	a.decode(t, &body)
	return body.Error.Code
}

func (s *api) do(method, path string, body []byte, hdr ...string) answer {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	require.NoError(s.t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := s.http.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return answer{Code: resp.StatusCode, Body: b, Header: resp.Header}
}

func (s *api) post(path string, body any) answer {
	s.t.Helper()
	b, err := json.Marshal(body)
	require.NoError(s.t, err)
	return s.do(http.MethodPost, path, b)
}

// register registers user for item and returns the 202 body and what its token says.
func (s *api) register(itemID, user string) (httpapi.RegisterResponse, token.Queue) {
	s.t.Helper()
	a := s.do(http.MethodPost, "/api/v1/items/"+itemID+"/registrations", []byte(`{"userId":"`+user+`"}`))
	require.Equal(s.t, http.StatusAccepted, a.Code, "%s", a.Body)
	var r httpapi.RegisterResponse
	a.decode(s.t, &r)
	q, err := s.signer.ParseQueue(r.Token)
	require.NoError(s.t, err)
	return r, q
}

// apply puts the registration in the line, as the consumer does.
func (s *api) apply(q token.Queue) {
	s.t.Helper()
	_, err := s.line.Apply(context.Background(), []queue.Op{{Kind: queue.OpRegister, ItemID: q.ItemID, TokenID: q.TokenID,
		UserID: q.PlaceKey(), Partition: q.Partition, Offset: q.Offset}})
	require.NoError(s.t, err)
}

// admit runs one promote of item, as the scheduler's leader does. Its
// admissions are not published yet: the place tells them once ack ran.
func (s *api) admit(itemID string) {
	s.t.Helper()
	_, err := s.line.Promote(context.Background(), itemID, 1, time.Now(), time.Second)
	require.NoError(s.t, err)
}

// ack acknowledges item's unpublished admissions, as the scheduler does
// once their event is on waitroom.admissions: from then on they are told.
func (s *api) ack(itemID string) {
	s.t.Helper()
	ctx := context.Background()
	entries, err := s.line.Unpublished(ctx, itemID, 1<<20)
	require.NoError(s.t, err)
	require.NoError(s.t, s.line.AckPublished(ctx, 1, []string{itemID}, []int{len(entries)}))
}

func (s *api) status(itemID, tok string) httpapi.StatusResponse {
	s.t.Helper()
	a := s.do(http.MethodGet, "/api/v1/items/"+itemID+"/registrations/"+tok, nil)
	require.Equal(s.t, http.StatusOK, a.Code, "%s", a.Body)
	var st httpapi.StatusResponse
	a.decode(s.t, &st)
	return st
}
