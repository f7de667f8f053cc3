package stack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/services/dev/stack"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

const (
	testKey    = "stack-test-hmac-key-0123456789abcdef"
	adminToken = "test-admin-token"
)

// env is one test's world: a real redis-server (or, with
// WR_TEST_REDIS=cluster, a 3-master Redis Cluster), a kfake cluster and,
// when started, the services.
type env struct {
	t       *testing.T
	brokers []string
	redis   *testenv.RedisServer // nil on a cluster
	rcfg    config.Redis
	rdb     redis.UniversalClient
	kcl     *kgo.Client
	stack   *stack.Stack
	signer  *token.Signer
	http    *http.Client
}

func newEnv(t *testing.T, items ...topics.ItemState) *env {
	t.Helper()
	if testenv.ClusterMode() {
		cfg, rdb := testenv.RedisBackend(t)
		return newEnvOn(t, nil, cfg, rdb, items...)
	}
	s := testenv.StartRedis(t)
	return newEnvOn(t, s, config.Redis{Addr: s.Addr}, s.Client(), items...)
}

// newEnvOn is newEnv on a Redis of the caller's (srv: its one redis-server,
// nil when there is none).
func newEnvOn(t *testing.T, srv *testenv.RedisServer, cfg config.Redis, rdb redis.UniversalClient, items ...topics.ItemState) *env {
	t.Helper()
	e := &env{t: t, brokers: testenv.Kafka(t, 12), redis: srv, rcfg: cfg, rdb: rdb}
	var err error
	e.kcl, err = kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ProducerLinger(0))
	require.NoError(t, err)
	t.Cleanup(e.kcl.Close)
	e.signer, err = token.New(token.HS256, testKey, "k1")
	require.NoError(t, err)
	e.http = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	require.NoError(t, stack.PublishItems(context.Background(), e.kcl, items...))
	return e
}

// item is an enabled item whose admission is paused (rate 0), so its line
// stays put for a test to inspect; admission tests set a rate.
func item(id string) topics.ItemState {
	return topics.ItemState{ItemID: id, Name: id, Stock: topics.Unlimited, Enabled: true,
		Policy: topics.AdmissionPolicy{RatePerSecond: 0, MaxActive: 10, SessionTTLSeconds: 60}, Version: 1, UpdatedAt: 1}
}

func (e *env) start() {
	e.t.Helper()
	s, err := stack.Start(context.Background(), stack.Options{Brokers: e.brokers, Redis: &e.rcfg, TokenKey: testKey,
		AdminToken: adminToken, Tick: 100 * time.Millisecond, Log: zaptest.NewLogger(e.t).Named("stack")})
	require.NoError(e.t, err)
	e.stack = s
	e.t.Cleanup(func() {
		// A connection the client dialled and never used sits on the server as
		// new, and http.Server.Shutdown waits up to 5 s for such a one (the
		// drain's whole budget): close the client's idle ones first.
		e.http.CloseIdleConnections()
		require.NoError(e.t, s.Stop())
	})
}

// needSingleRedis skips a test that kills, restarts or snapshots the one
// redis-server when the suite runs against a cluster.
func needSingleRedis(t *testing.T, why string) {
	t.Helper()
	if testenv.ClusterMode() {
		t.Skip("needs a single redis-server (WR_TEST_REDIS=cluster): " + why)
	}
}

// flushAll empties the view: every master of a cluster.
func (e *env) flushAll() {
	e.t.Helper()
	ctx := context.Background()
	if c, ok := e.rdb.(*redis.ClusterClient); ok {
		require.NoError(e.t, c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.FlushAll(ctx).Err() }))
		return
	}
	require.NoError(e.t, e.rdb.FlushAll(ctx).Err())
}

type answer struct {
	Code int
	Body []byte
}

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(a.Body, v), "body %s", a.Body)
}

func (e *env) do(method, path string, body []byte, hdr ...string) answer {
	e.t.Helper()
	req, err := http.NewRequest(method, e.stack.APIURL+path, bytes.NewReader(body))
	require.NoError(e.t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.http.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return answer{Code: resp.StatusCode, Body: b}
}

// register registers user for item and returns the 202 body and what its token says.
func (e *env) register(itemID, user string) (httpapi.RegisterResponse, token.Queue) {
	e.t.Helper()
	body := []byte(`{"userId":"` + user + `"}`)
	if user == "" {
		body = nil
	}
	a := e.do(http.MethodPost, "/api/v1/items/"+itemID+"/registrations", body)
	require.Equal(e.t, http.StatusAccepted, a.Code, "body %s", a.Body)
	var r httpapi.RegisterResponse
	a.decode(e.t, &r)
	q, err := e.signer.ParseQueue(r.Token)
	require.NoError(e.t, err)
	return r, q
}

func (e *env) status(itemID, tok string) httpapi.StatusResponse {
	e.t.Helper()
	a := e.do(http.MethodGet, "/api/v1/items/"+itemID+"/registrations/"+tok, nil)
	require.Equal(e.t, http.StatusOK, a.Code, "body %s", a.Body)
	var s httpapi.StatusResponse
	a.decode(e.t, &s)
	return s
}

// admitted waits until tok's status reads ADMITTED and returns it: a place
// promoted in Redis reads WAITING at position 1 until the scheduler's
// publish of its admission is acknowledged (status.lua, unpublished.lua).
func (e *env) admitted(itemID, tok string) httpapi.StatusResponse {
	e.t.Helper()
	var st httpapi.StatusResponse
	require.Eventually(e.t, func() bool {
		st = e.status(itemID, tok)
		return st.Status == "ADMITTED"
	}, 15*time.Second, 20*time.Millisecond, "admitted and published")
	return st
}

// waitLine waits until item's line holds n tokens and returns it in order.
func (e *env) waitLine(itemID string, n int) []string {
	e.t.Helper()
	l := queue.New(e.rdb)
	var line []string
	require.Eventually(e.t, func() bool {
		var err error
		line, err = l.Waiting(context.Background(), itemID, 0)
		require.NoError(e.t, err)
		return len(line) >= n
	}, 60*time.Second, 20*time.Millisecond, "line of %s never reached %d", itemID, n)
	return line
}

// byOffset returns the tokenIds of regs ordered by their broker offset (one
// item lives on one partition, so the offset is its order).
func byOffset(t *testing.T, regs []token.Queue) []string {
	t.Helper()
	sort.Slice(regs, func(i, j int) bool { return regs[i].Offset < regs[j].Offset })
	out := make([]string, len(regs))
	for i, r := range regs {
		if i > 0 {
			require.Equal(t, regs[0].Partition, r.Partition, "one item must live on one partition")
		}
		out[i] = r.TokenID
	}
	return out
}

func jsonBody(s string) io.Reader { return bytes.NewReader([]byte(s)) }
