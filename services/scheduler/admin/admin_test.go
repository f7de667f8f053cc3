package admin_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/blocklist"
	"github.com/waitroom/waitroom/pkg/kafka/itemcache"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/scheduler/admin"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

const token = "s3cret-admin-token"

// env is a scheduler's admin API over a real redis-server and kfake, with a
// running item cache, served over HTTP.
type env struct {
	t       *testing.T
	line    *queue.Line
	rdb     redis.UniversalClient
	cache   *itemcache.Cache
	blocks  *blocklist.List
	prod    *kgo.Client
	brokers []string
	url     string
}

// fakes replace a dependency of the admin server in one test.
type fakes struct {
	prod    admin.Producer
	items   admin.Items
	leaders func(context.Context) ([]admin.ShardLeader, error)
	bypass  ed25519.PrivateKey // signs bypass codes (nil: off)
	drawKey []byte
}

func newEnv(t *testing.T, f fakes) *env {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	rdb := testenv.Redis(t)
	e := &env{t: t, line: queue.New(rdb), rdb: rdb, brokers: testenv.Kafka(t, 3)}
	var err error
	if e.cache, err = itemcache.New([]kgo.Opt{kgo.SeedBrokers(e.brokers...)}, log); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if e.blocks, err = blocklist.New([]kgo.Opt{kgo.SeedBrokers(e.brokers...)}, log); err != nil {
		t.Fatal(err)
	}
	bdone := make(chan struct{})
	go func() { defer close(done); _ = e.cache.Run(ctx) }()
	go func() { defer close(bdone); _ = e.blocks.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; <-bdone })
	if e.prod, err = kgo.NewClient(kgo.SeedBrokers(e.brokers...)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.prod.Close)
	var prod admin.Producer = e.prod
	if f.prod != nil {
		prod = f.prod
	}
	var items admin.Items = e.cache
	if f.items != nil {
		items = f.items
	}
	engine := httpserver.New(log, prometheus.NewRegistry(), &httpserver.Readiness{})
	admin.New(e.line, items, prod, token, log).WithDrawKey(f.drawKey).WithKafka([]kgo.Opt{kgo.SeedBrokers(e.brokers...)}).WithBlocks(e.blocks).
		WithOperations(admin.NewOperations(e.prod, []string{"waitroom-consumer"}, f.leaders)).WithBypass(f.bypass).
		WithConsole(rdb, admin.ConsoleOptions{SecureCookie: true}).Routes(engine)
	srv := httptest.NewServer(engine)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// seed publishes an item the way the product service does and waits until
// both the cache and Redis hold it.
func (e *env) seed(s topics.ItemState) {
	e.t.Helper()
	s.V, s.UpdatedAt = topics.Version, time.Now().UnixMilli()
	rec := &kgo.Record{Topic: topics.Items, Key: []byte(s.ItemID), Value: topics.Encode(&s)}
	if err := e.prod.ProduceSync(e.ctx(), rec).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.line.ApplyItem(e.ctx(), s); err != nil {
		e.t.Fatal(err)
	}
	if err := e.cache.Sync(e.ctx()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) register(item string, n int) {
	e.t.Helper()
	ops := make([]queue.Op, n)
	for i := range ops {
		id := item + "-" + string(rune('a'+i))
		ops[i] = queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: "tok-" + id, UserID: "user-" + id, Partition: 0, Offset: int64(i)}
	}
	if _, err := e.line.Apply(e.ctx(), ops); err != nil {
		e.t.Fatal(err)
	}
}

// do sends a request with the admin token and decodes a 200 answer into out.
func (e *env) do(method, path, body string, out any) (int, httpserver.ErrorDetail) {
	e.t.Helper()
	return call(e.t, method, e.url+path, "Bearer "+token, body, out)
}

func call(t *testing.T, method, url, auth, body string, out any) (int, httpserver.ErrorDetail) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		var eb httpserver.ErrorBody
		if err := json.Unmarshal(b, &eb); err != nil || eb.Error.Code == "" {
			t.Fatalf("%s %s: %d with body %q, want the JSON error body", method, url, res.StatusCode, b)
		}
		return res.StatusCode, eb.Error
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, url, b, err)
		}
	}
	return res.StatusCode, httpserver.ErrorDetail{}
}

func TestAuth(t *testing.T) {
	e := newEnv(t, fakes{})
	routes := [][2]string{
		{http.MethodGet, "/items"}, {http.MethodGet, "/items/drop-1"}, {http.MethodGet, "/stats"},
		{http.MethodPut, "/items/drop-1/admission"}, {http.MethodPost, "/items/drop-1"},
		{http.MethodGet, "/dlq"}, {http.MethodGet, "/dlq/0/0"}, {http.MethodPost, "/dlq/replay"},
		{http.MethodGet, "/blocks"}, {http.MethodPost, "/blocks"}, {http.MethodDelete, "/blocks?subject=user:a"},
		{http.MethodPost, "/items/drop-1/bypass"}, {http.MethodGet, "/items/drop-1/bypass"},
	}
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer wrong", "Bearer " + token + "x", "Basic " + token, token} {
		for _, r := range routes {
			code, ed := call(t, r[0], e.url+admin.Prefix+r[1], auth, `{"ratePerSecond":1}`, nil)
			if code != http.StatusUnauthorized || ed.Code != "UNAUTHORIZED" {
				t.Errorf("%s %s with %q: %d %s, want 401 UNAUTHORIZED", r[0], r[1], auth, code, ed.Code)
			}
		}
	}
	for _, auth := range []string{"Bearer " + token, "bearer " + token} {
		if code, ed := call(t, http.MethodGet, e.url+admin.Prefix+"/stats", auth, "", nil); code != http.StatusOK {
			t.Errorf("stats with %q: %d %s, want 200", auth, code, ed.Code)
		}
	}

	t.Run("empty token refuses everything", func(t *testing.T) {
		g := gin.New()
		admin.New(nil, nil, nil, "", zap.NewNop()).Routes(g) // never reaches its dependencies
		srv := httptest.NewServer(g)
		defer srv.Close()
		for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer  ", "Bearer x"} {
			if code, ed := call(t, http.MethodGet, srv.URL+admin.Prefix+"/items", auth, "", nil); code != http.StatusUnauthorized || ed.Code != "UNAUTHORIZED" {
				t.Errorf("with %q: %d %s, want 401 UNAUTHORIZED", auth, code, ed.Code)
			}
		}
	})
}

func TestAdmissionValidation(t *testing.T) {
	e := newEnv(t, fakes{})
	e.seed(topics.ItemState{ItemID: "drop-1", Name: "Drop", Stock: -1, Enabled: true, Version: 3,
		Policy: topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 100, SessionTTLSeconds: 300}})
	cases := []struct {
		name, item, body string
		status           int
		code, field      string
	}{
		{"negative rate", "drop-1", `{"ratePerSecond":-1}`, 400, "INVALID_POLICY", "ratePerSecond"},
		{"absurd maxActive", "drop-1", `{"maxActive":1000000000}`, 400, "INVALID_POLICY", "maxActive"},
		{"ttl 0", "drop-1", `{"sessionTTLSeconds":0}`, 400, "INVALID_POLICY", "sessionTTLSeconds"},
		{"resume at rate 0", "drop-1", `{"paused":false,"ratePerSecond":0}`, 400, "INVALID_POLICY", "ratePerSecond"},
		{"nothing to change", "drop-1", `{}`, 400, "INVALID_POLICY", ""},
		{"unknown field", "drop-1", `{"rate":5}`, 400, "INVALID_JSON", "rate"},
		{"wrong type", "drop-1", `{"maxActive":"ten"}`, 400, "INVALID_JSON", "maxActive"},
		{"not json", "drop-1", `ratePerSecond=5`, 400, "INVALID_JSON", ""},
		{"too large", "drop-1", `{"ratePerSecond":5` + strings.Repeat(" ", 5000) + `}`, 413, "BODY_TOO_LARGE", ""},
		{"bad item id", "drop*1", `{"ratePerSecond":5}`, 400, "INVALID_ITEM_ID", ""},
		{"unknown item", "nope", `{"ratePerSecond":5}`, 404, "ITEM_NOT_FOUND", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, ed := e.do(http.MethodPut, admin.Prefix+"/items/"+tc.item+"/admission", tc.body, nil)
			if code != tc.status || ed.Code != tc.code {
				t.Fatalf("%d %s (%s), want %d %s", code, ed.Code, ed.Message, tc.status, tc.code)
			}
			if !strings.Contains(ed.Message, tc.field) {
				t.Fatalf("message %q does not name %q", ed.Message, tc.field)
			}
		})
	}
	// None of them changed anything.
	if s, _, err := e.line.Item(e.ctx(), "drop-1"); err != nil || s.Version != 3 || s.Policy.RatePerSecond != 10 {
		t.Fatalf("state after refused requests: %+v %v, want version 3 unchanged", s, err)
	}
}

func TestAdmissionUpdate(t *testing.T) {
	e := newEnv(t, fakes{})
	e.seed(topics.ItemState{ItemID: "drop-1", Name: "Drop", Stock: 50, Enabled: true, Version: 3,
		Policy: topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 100, SessionTTLSeconds: 300}})

	steps := []struct {
		body string
		want topics.AdmissionPolicy
	}{
		{`{"ratePerSecond":50,"maxActive":7}`, topics.AdmissionPolicy{RatePerSecond: 50, MaxActive: 7, SessionTTLSeconds: 300}},
		// Right after the first: the cache may still hold version 3, Redis has 4.
		// A pause keeps the rate; {"paused":false} alone resumes at it.
		{`{"paused":true}`, topics.AdmissionPolicy{RatePerSecond: 50, MaxActive: 7, SessionTTLSeconds: 300, Paused: true}},
		{`{"paused":false}`, topics.AdmissionPolicy{RatePerSecond: 50, MaxActive: 7, SessionTTLSeconds: 300}},
		{`{"paused":true,"ratePerSecond":3}`, topics.AdmissionPolicy{RatePerSecond: 3, MaxActive: 7, SessionTTLSeconds: 300, Paused: true}},
		{`{"paused":false,"ratePerSecond":2.5,"sessionTTLSeconds":60}`, topics.AdmissionPolicy{RatePerSecond: 2.5, MaxActive: 7, SessionTTLSeconds: 60}},
	}
	for i, st := range steps {
		version := int64(4 + i)
		var v admin.ItemView
		if code, ed := e.do(http.MethodPut, admin.Prefix+"/items/drop-1/admission", st.body, &v); code != http.StatusOK {
			t.Fatalf("PUT %s: %d %s %s", st.body, code, ed.Code, ed.Message)
		}
		if v.Version != version || v.Policy != st.want || v.Paused != st.want.Paused || v.Name != "Drop" || v.Stock != 50 {
			t.Fatalf("PUT %s answered %+v, want version %d policy %+v", st.body, v, version, st.want)
		}
		// Effective at once: Redis holds it before the consumer saw the record.
		s, ok, err := e.line.Item(e.ctx(), "drop-1")
		if err != nil || !ok || s.Version != version || s.Policy != st.want || s.Name != "Drop" || s.Stock != 50 || !s.Enabled {
			t.Fatalf("Redis after PUT %s: %+v %v %v, want version %d policy %+v", st.body, s, ok, err, version, st.want)
		}
	}

	// And recorded: every version is on waitroom.items, keyed by the item.
	got := consumeItems(t, e.brokers, 1+len(steps))
	for i, st := range steps {
		s, ok := got["drop-1@"+strconv.Itoa(4+i)]
		if !ok || s.Policy != st.want || s.Name != "Drop" || s.Stock != 50 {
			t.Fatalf("topic version %d: %+v (found %v), want policy %+v", 4+i, s, ok, st.want)
		}
	}
	if err := e.cache.Sync(e.ctx()); err != nil {
		t.Fatal(err)
	}
	if s, _ := e.cache.Get("drop-1"); s.Version != int64(3+len(steps)) {
		t.Fatalf("cache holds version %d, want %d", s.Version, 3+len(steps))
	}
}

// consumeItems reads waitroom.items from the start until it has n records,
// and returns them keyed by "itemId@version".
func consumeItems(t *testing.T, brokers []string, n int) map[string]topics.ItemState {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics.Items),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]topics.ItemState{}
	for read := 0; read < n; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d records of %s, want %d: %v", read, topics.Items, n, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			s, err := topics.DecodeItem(r.Value)
			if err != nil {
				t.Fatalf("record at %d/%d: %v", r.Partition, r.Offset, err)
			}
			if string(r.Key) != s.ItemID {
				t.Fatalf("record key %q holds item %q", r.Key, s.ItemID)
			}
			out[s.ItemID+"@"+strconv.FormatInt(s.Version, 10)] = s
		})
	}
	return out
}

func TestItemCreateAndUpdate(t *testing.T) {
	e := newEnv(t, fakes{})
	var v admin.ItemView
	if code, ed := e.do(http.MethodPost, admin.Prefix+"/items/sneakers-1", `{"name":"Sneakers","stock":100}`, &v); code != http.StatusOK {
		t.Fatalf("create: %d %s %s", code, ed.Code, ed.Message)
	}
	defaults := topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 1000, SessionTTLSeconds: 300}
	if v.ItemID != "sneakers-1" || v.Name != "Sneakers" || v.Stock != 100 || !v.Enabled || v.Version != 1 || v.Policy != defaults {
		t.Fatalf("created %+v", v)
	}
	if code, ed := e.do(http.MethodPost, admin.Prefix+"/items/sneakers-1", `{"enabled":false}`, &v); code != http.StatusOK {
		t.Fatalf("update: %d %s %s", code, ed.Code, ed.Message)
	}
	s, ok, err := e.line.Item(e.ctx(), "sneakers-1")
	if err != nil || !ok || s.Version != 2 || s.Enabled || s.Name != "Sneakers" || s.Stock != 100 || s.Policy != defaults {
		t.Fatalf("Redis after update: %+v %v %v", s, ok, err)
	}
	if v.Version != 2 || v.Enabled {
		t.Fatalf("update answered %+v", v)
	}
	if code, _ := e.do(http.MethodPost, admin.Prefix+"/items/plain", `{}`, &v); code != http.StatusOK || v.Name != "plain" || v.Stock != -1 || !v.Enabled {
		t.Fatalf("create with defaults: %d %+v", code, v)
	}
	// The queue mode is an item update like the others, kept in Redis for promote.
	if code, ed := e.do(http.MethodPost, admin.Prefix+"/items/sneakers-1", `{"mode":"reject","rejectMessage":"Back at 10"}`, &v); code != http.StatusOK {
		t.Fatalf("mode: %d %s %s", code, ed.Code, ed.Message)
	}
	if s, ok, err := e.line.Item(e.ctx(), "sneakers-1"); err != nil || !ok || s.Mode != topics.ModeReject || s.RejectMessage != "Back at 10" || v.Mode != "reject" {
		t.Fatalf("mode in Redis %+v %v %v, answered %+v", s, ok, err, v)
	}

	for _, tc := range []struct{ name, item, body, code string }{
		{"stock below -1", "sneakers-1", `{"stock":-2}`, "INVALID_ITEM"},
		{"long name", "sneakers-1", `{"name":"` + strings.Repeat("x", 201) + `"}`, "INVALID_ITEM"},
		{"wrong type", "sneakers-1", `{"enabled":"yes"}`, "INVALID_JSON"},
		{"unknown field", "sneakers-1", `{"price":3}`, "INVALID_JSON"},
		{"unknown mode", "sneakers-1", `{"mode":"lottery"}`, "INVALID_ITEM"},
		{"bad item id", "a*b", `{}`, "INVALID_ITEM_ID"},
		{"reserved item id", topics.ReservedItemID, `{}`, "INVALID_ITEM_ID"},
	} {
		if code, ed := e.do(http.MethodPost, admin.Prefix+"/items/"+tc.item, tc.body, nil); code != http.StatusBadRequest || ed.Code != tc.code {
			t.Errorf("%s: %d %s, want 400 %s", tc.name, code, ed.Code, tc.code)
		}
	}
	got := consumeItems(t, e.brokers, 3)
	if s, ok := got["sneakers-1@2"]; !ok || s.Enabled || s.Name != "Sneakers" || s.Stock != 100 {
		t.Fatalf("topic sneakers-1 version 2: %+v (found %v)", s, ok)
	}
	if s, ok := got["plain@1"]; !ok || s.Name != "plain" || s.Policy != defaults {
		t.Fatalf("topic plain version 1: %+v (found %v)", s, ok)
	}
}

func TestReadItemsAndStats(t *testing.T) {
	e := newEnv(t, fakes{})
	e.seed(topics.ItemState{ItemID: "a-item", Name: "A", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 1, SessionTTLSeconds: 300}})
	e.seed(topics.ItemState{ItemID: "b-item", Name: "B", Stock: 5, Enabled: true, Version: 2,
		Policy: topics.AdmissionPolicy{RatePerSecond: 0, MaxActive: 0, SessionTTLSeconds: 60}})
	e.register("a-item", 3)
	e.register("b-item", 2)
	// One tick: maxActive 1 lets exactly one person of a-item in.
	if tk, err := e.line.Promote(e.ctx(), "a-item", 1, time.Now(), time.Second); err != nil || tk.Head != 1 || tk.Active != 1 {
		t.Fatalf("promote: %+v %v", tk, err)
	}

	var list admin.ItemsResponse
	if code, ed := e.do(http.MethodGet, admin.Prefix+"/items", "", &list); code != http.StatusOK {
		t.Fatalf("list: %d %s", code, ed.Code)
	}
	wantA := admin.ItemView{ItemID: "a-item", Name: "A", Stock: -1, Enabled: true, Mode: "fifo", Version: 1,
		Policy:  topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 1, SessionTTLSeconds: 300},
		Waiting: 2, Admitted: 1, Head: 1, Seq: 3, AdmittedLastMinute: 1, Active: true}
	wantB := admin.ItemView{ItemID: "b-item", Name: "B", Stock: 5, Enabled: true, Paused: true, Mode: "fifo", Version: 2,
		Policy: topics.AdmissionPolicy{SessionTTLSeconds: 60}, Waiting: 2, Seq: 2, Active: true}
	if len(list.Items) != 2 {
		t.Fatalf("listed %d items, want 2: %+v", len(list.Items), list.Items)
	}
	for i, want := range []admin.ItemView{wantA, wantB} {
		got := list.Items[i]
		got.UpdatedAt = 0
		if i == 0 && (got.EtaLastSeconds < 2 || got.EtaLastSeconds > 3) {
			t.Errorf("a-item's last in line: ETA %d s, want about 2 (2 behind a full room freeing 1/s)", got.EtaLastSeconds)
		}
		got.EtaLastSeconds = 0
		if !reflect.DeepEqual(got, want) {
			t.Errorf("item %d:\n got %+v\nwant %+v", i, got, want)
		}
	}

	var one admin.ItemView
	if code, ed := e.do(http.MethodGet, admin.Prefix+"/items/a-item", "", &one); code != http.StatusOK {
		t.Fatalf("get: %d %s", code, ed.Code)
	}
	if one.UpdatedAt, one.EtaLastSeconds = 0, 0; !reflect.DeepEqual(one, wantA) {
		t.Errorf("get a-item:\n got %+v\nwant %+v", one, wantA)
	}
	if code, ed := e.do(http.MethodGet, admin.Prefix+"/items/nope", "", nil); code != http.StatusNotFound || ed.Code != "ITEM_NOT_FOUND" {
		t.Errorf("unknown item: %d %s, want 404 ITEM_NOT_FOUND", code, ed.Code)
	}
	if code, ed := e.do(http.MethodGet, admin.Prefix+"/items/no*pe", "", nil); code != http.StatusBadRequest || ed.Code != "INVALID_ITEM_ID" {
		t.Errorf("bad item id: %d %s, want 400 INVALID_ITEM_ID", code, ed.Code)
	}
	// An item whose state only Redis holds (the cache has not caught up) is still found.
	if _, err := e.line.ApplyItem(e.ctx(), topics.ItemState{V: 1, ItemID: "redis-only", Name: "R", Stock: -1, Version: 9}); err != nil {
		t.Fatal(err)
	}
	if code, _ := e.do(http.MethodGet, admin.Prefix+"/items/redis-only", "", &one); code != http.StatusOK || one.Version != 9 || one.Active {
		t.Errorf("redis-only item: %d %+v", code, one)
	}

	var tot admin.Totals
	if code, ed := e.do(http.MethodGet, admin.Prefix+"/stats", "", &tot); code != http.StatusOK {
		t.Fatalf("stats: %d %s", code, ed.Code)
	}
	if want := (admin.Totals{Items: 2, Waiting: 4, Admitted: 1, AdmittedLastMinute: 1, Registered: 5}); tot != want {
		t.Errorf("stats %+v, want %+v", tot, want)
	}
}

// failingProducer is a Kafka that takes nothing.
type failingProducer struct{}

func (failingProducer) ProduceSync(_ context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	out := make(kgo.ProduceResults, len(rs))
	for i, r := range rs {
		out[i] = kgo.ProduceResult{Record: r, Err: errors.New("broker unreachable")}
	}
	return out
}

func TestPublishFailureChangesNothing(t *testing.T) {
	e := newEnv(t, fakes{prod: failingProducer{}})
	e.seed(topics.ItemState{ItemID: "drop-1", Name: "Drop", Stock: -1, Enabled: true, Version: 3,
		Policy: topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 100, SessionTTLSeconds: 300}})
	code, ed := e.do(http.MethodPut, admin.Prefix+"/items/drop-1/admission", `{"paused":true}`, nil)
	if code != http.StatusServiceUnavailable || ed.Code != "UNAVAILABLE" {
		t.Fatalf("%d %s, want 503 UNAVAILABLE", code, ed.Code)
	}
	if s, _, err := e.line.Item(e.ctx(), "drop-1"); err != nil || s.Version != 3 || s.Policy.RatePerSecond != 10 {
		t.Fatalf("Redis changed without a record on the topic: %+v %v", s, err)
	}
}

// staleItems is an item cache stuck at one state, as a lagging replica's is.
type staleItems map[string]topics.ItemState

func (m staleItems) Get(item string) (topics.ItemState, bool) { s, ok := m[item]; return s, ok }
func (m staleItems) All() map[string]topics.ItemState         { return m }

// TestStaleCache: writes build on Redis's newer state and never reuse a
// version when the cache has not seen the previous write yet.
func TestStaleCache(t *testing.T) {
	seed := topics.ItemState{ItemID: "drop-1", Name: "Drop", Stock: -1, Enabled: true, Version: 3,
		Policy: topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 100, SessionTTLSeconds: 300}}
	e := newEnv(t, fakes{items: staleItems{"drop-1": seed}})
	e.seed(seed)
	for i, body := range []string{`{"maxActive":7}`, `{"sessionTTLSeconds":60}`, `{"paused":true}`} {
		var v admin.ItemView
		if code, ed := e.do(http.MethodPut, admin.Prefix+"/items/drop-1/admission", body, &v); code != http.StatusOK {
			t.Fatalf("PUT %s: %d %s %s", body, code, ed.Code, ed.Message)
		}
		if v.Version != int64(4+i) {
			t.Fatalf("PUT %s: version %d, want %d", body, v.Version, 4+i)
		}
	}
	want := topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 7, SessionTTLSeconds: 60, Paused: true}
	if s, _, err := e.line.Item(e.ctx(), "drop-1"); err != nil || s.Version != 6 || s.Policy != want {
		t.Fatalf("Redis: %+v %v, want version 6 policy %+v", s, err, want)
	}
	var one admin.ItemView
	if code, _ := e.do(http.MethodGet, admin.Prefix+"/items/drop-1", "", &one); code != http.StatusOK || one.Version != 6 || one.Policy != want {
		t.Fatalf("GET shows %d %+v, want Redis's newer version 6", code, one)
	}
}
