package admin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/services/scheduler/admin"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// deadLetter puts n registrations that failed with err on the registrations DLQ.
func (e *env) deadLetter(n int, err error, value func(i int) []byte) {
	e.t.Helper()
	recs := make([]*kgo.Record, n)
	letters := make([]dlq.Letter, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topics.Registrations, Key: []byte("ghost"), Value: value(i)}
	}
	if err := e.prod.ProduceSync(e.ctx(), recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
	for i, r := range recs {
		letters[i] = dlq.Letter{Record: r, Err: err, Attempts: 1}
	}
	if err := dlq.NewWriter(e.prod).Send(e.ctx(), letters...); err != nil {
		e.t.Fatal(err)
	}
}

func ghost(i int) []byte {
	return topics.Encode(&topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: fmt.Sprint("t", i), ItemID: "ghost", UserID: fmt.Sprint("u", i), RequestedAt: 1})
}

func TestDLQListShowReplay(t *testing.T) {
	e := newEnv(t, fakes{})
	e.deadLetter(3, fmt.Errorf("%w: not json", topics.ErrMalformed), func(int) []byte { return []byte{0xff, '{'} })
	e.deadLetter(5, fmt.Errorf("%w: unknown item %q", topics.ErrInvalid, "ghost"), ghost)

	var l dlq.List
	if code, ed := e.do(http.MethodGet, admin.Prefix+"/dlq", "", &l); code != http.StatusOK {
		t.Fatalf("list: %d %s %s", code, ed.Code, ed.Message)
	}
	if l.Topic != topics.DLQ(topics.Registrations) || len(l.Entries) != 8 || l.Truncated {
		t.Fatalf("list: topic %s, %d entries, truncated %v", l.Topic, len(l.Entries), l.Truncated)
	}
	if got := string(l.Entries[0].Value); got != "\xff{" {
		t.Errorf("garbage value came back as %q", got)
	}
	if code, _ := e.do(http.MethodGet, admin.Prefix+"/dlq?topic=registrations&errorType=VALIDATION_ERROR&since=1h&limit=2", "", &l); code != http.StatusOK ||
		len(l.Entries) != 2 || !l.Truncated || l.Entries[0].Verdict.ErrorType != topics.ErrorTypeValidation {
		t.Fatalf("filtered list: %d %+v", code, l)
	}
	var one dlq.Entry
	if code, ed := e.do(http.MethodGet, admin.Prefix+"/dlq/"+l.Entries[0].ID(), "", &one); code != http.StatusOK || string(one.Value) != string(ghost(0)) {
		t.Fatalf("show: %d %s %q", code, ed.Code, one.Value)
	}

	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{http.MethodGet, "/dlq?errorType=OOPS", "", 400, "INVALID_FILTER"},
		{http.MethodGet, "/dlq?since=yesterday", "", 400, "INVALID_FILTER"},
		{http.MethodGet, "/dlq?limit=0", "", 400, "INVALID_QUERY"},
		{http.MethodGet, "/dlq?topic=orders", "", 400, "INVALID_TOPIC"},
		{http.MethodGet, "/dlq?topic=nope.dlq", "", 404, "TOPIC_NOT_FOUND"},
		{http.MethodGet, "/dlq/0/999", "", 404, "NOT_FOUND"},
		{http.MethodGet, "/dlq/x/1", "", 400, "INVALID_PATH"},
		{http.MethodPost, "/dlq/replay", `{"dry":true}`, 400, "INVALID_JSON"},
		{http.MethodPost, "/dlq/replay", `{"rate":-1}`, 400, "INVALID_FILTER"},
	} {
		if code, ed := e.do(tc.method, admin.Prefix+tc.path, tc.body, nil); code != tc.status || ed.Code != tc.code {
			t.Errorf("%s %s %s: %d %s (%s), want %d %s", tc.method, tc.path, tc.body, code, ed.Code, ed.Message, tc.status, tc.code)
		}
	}

	var rep dlq.Report
	if code, ed := e.do(http.MethodPost, admin.Prefix+"/dlq/replay", `{"topic":"registrations","dryRun":true}`, &rep); code != http.StatusOK {
		t.Fatalf("dry run: %d %s %s", code, ed.Code, ed.Message)
	}
	if !rep.DryRun || rep.Replayed != 5 || rep.StillInvalid != 3 {
		t.Fatalf("dry run: %+v", rep)
	}
	if code, ed := e.do(http.MethodPost, admin.Prefix+"/dlq/replay", `{"errorType":"VALIDATION_ERROR"}`, &rep); code != http.StatusOK {
		t.Fatalf("replay: %d %s %s", code, ed.Code, ed.Message)
	}
	if rep.Replayed != 5 || rep.NotMatched != 3 || rep.Group != dlq.Group(topics.DLQ(topics.Registrations)) {
		t.Fatalf("replay: %+v", rep)
	}
	for _, o := range rep.Outcomes {
		if o.Action != dlq.ActionReplayed || o.To == "" {
			t.Errorf("outcome %+v", o)
		}
	}
	if code, _ := e.do(http.MethodPost, admin.Prefix+"/dlq/replay", `{}`, &rep); code != http.StatusOK || rep.Examined != 0 || rep.Replayed != 0 {
		t.Fatalf("second replay: %d %+v, want nothing examined", code, rep)
	}
}

func TestDLQWithoutKafka(t *testing.T) {
	g := gin.New()
	admin.New(nil, nil, nil, token, zap.NewNop()).Routes(g)
	srv := httptest.NewServer(g)
	defer srv.Close()
	for _, r := range [][2]string{{http.MethodGet, "/dlq"}, {http.MethodPost, "/dlq/replay"}} {
		if code, ed := call(t, r[0], srv.URL+admin.Prefix+r[1], "Bearer "+token, "{}", nil); code != http.StatusConflict || ed.Code != "DLQ_DISABLED" {
			t.Errorf("%s %s: %d %s, want 409 DLQ_DISABLED", r[0], r[1], code, ed.Code)
		}
	}
}
