package sse_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/docs"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// TestServedRoutesAreTheSpecs: every route of the notifier's engine (the
// httpserver shell and the stream, as sse.Run builds it) is in
// docs/openapi.yaml for the notifier, and every route the spec gives the
// notifier is served.
func TestServedRoutesAreTheSpecs(t *testing.T) {
	engine := httpserver.New(zap.NewNop(), httpserver.NewRegistry(), &httpserver.Readiness{})
	sse.NewServer(nil, nil, nil, nil, nil, sse.Options{}, nil, zap.NewNop()).Routes(engine)
	require.NoError(t, docs.CheckRoutes(context.Background(), "notifier", engine.Routes()))
}

// TestAnswersMatchTheSpec opens streams over real HTTP (Redis, kfake): every
// refusal, the stream's answer and the data of each event a stream sends
// (pending, position, admitted, the final states) validate against
// docs/openapi.yaml (the stream's route and the StreamEvent schema).
func TestAnswersMatchTheSpec(t *testing.T) {
	w := newWorld(t)
	paused := topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60}
	w.setItem("wait", -1, true, paused)
	w.setItem("go", -1, true, paused)
	w.setItem("gone", 0, true, paused)
	w.setItem("shut", -1, false, paused)
	waiting := w.register("wait", 2)[1]
	admitted := w.register("go", 1)[0]
	sold, closed := w.register("gone", 1)[0], w.register("shut", 1)[0]
	w.setItem("go", -1, true, topics.AdmissionPolicy{RatePerSecond: 10, SessionTTLSeconds: 60})
	tk, err := w.line.Promote(context.Background(), "go", 1, time.Now(), time.Second)
	require.NoError(t, err)
	require.NoError(t, w.line.AckPublished(context.Background(), 1, []string{"go"}, []int{int(tk.UnpublishedTotal)})) // published: told
	pending, err := w.signer.IssueQueue(token.Queue{TokenID: "not-applied-yet", ItemID: "wait", UserID: "late", Offset: 99}, time.Hour)
	require.NoError(t, err)
	nt := w.notifier(time.Second, 0)
	ctx := context.Background()
	c, err := docs.NewContract(ctx, nt.URL)
	require.NoError(t, err)
	doc, err := docs.OpenAPI(ctx)
	require.NoError(t, err)
	eventSchema := doc.Components.Schemas["StreamEvent"].Value

	// open opens a stream, checks its status (and error code) and the
	// exchange against the spec, and returns the first event (refusals: none).
	open := func(path string, want int, wantCode string, hdr ...string) *event {
		t.Helper()
		h := map[string]string{}
		for i := 0; i+1 < len(hdr); i += 2 {
			h[hdr[i]] = hdr[i+1]
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := w.open(cctx, nt.URL+path, h)
		require.NoError(t, err)
		defer s.close()
		require.Equal(t, want, s.Resp.StatusCode, path)
		req, err := http.NewRequest(http.MethodGet, nt.URL+path, nil)
		require.NoError(t, err)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		if want != http.StatusOK {
			b, err := io.ReadAll(s.Resp.Body)
			require.NoError(t, err)
			var eb httpserver.ErrorBody
			require.NoError(t, json.Unmarshal(b, &eb), "%s", b)
			require.Equal(t, wantCode, eb.Error.Code, path)
			require.NoError(t, c.Check(ctx, req, nil, false, s.Resp.StatusCode, s.Resp.Header, b))
			return nil
		}
		require.NoError(t, c.Check(ctx, req, nil, false, s.Resp.StatusCode, s.Resp.Header, nil))
		ev, err := s.next()
		require.NoError(t, err, path)
		var data any
		require.NoError(t, json.Unmarshal([]byte(ev.Data), &data), ev.Data)
		require.NoError(t, eventSchema.VisitJSON(data, openapi3.EnableJSONSchema2020()), "event %s data %s: not a StreamEvent", ev.Type, ev.Data)
		return &ev
	}
	events := func(item, tok string) string { return "/api/v1/items/" + item + "/registrations/" + tok + "/events" }

	for _, tc := range []struct {
		path, hdr, event string
	}{
		{events("wait", waiting.Token), "", sse.EventPosition},
		{events("wait", "current"), waiting.Token, sse.EventPosition},
		{events("wait", pending), "", sse.EventPending},
		{events("go", admitted.Token), "", sse.EventAdmitted},
		{events("gone", sold.Token), "", sse.EventSoldOut},
		{events("shut", closed.Token), "", sse.EventClosed},
	} {
		var ev *event
		if tc.hdr != "" {
			ev = open(tc.path, 200, "", "Authorization", "Bearer "+tc.hdr, "Last-Event-ID", "0")
		} else {
			ev = open(tc.path, 200, "")
		}
		require.Equal(t, tc.event, ev.Type, tc.path)
	}
	open(events("wait", "current"), 401, "TOKEN_MISSING")
	open(events("wait", "not-a-token"), 401, "TOKEN_INVALID")
	open(events("go", waiting.Token), 403, "TOKEN_ITEM_MISMATCH")
	open(events("t%20x", waiting.Token), 400, "INVALID_ITEM_ID")
	for _, r := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := w.http.Get(nt.URL + r)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		req, _ := http.NewRequest(http.MethodGet, nt.URL+r, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, r)
		require.NoError(t, c.Check(ctx, req, nil, false, resp.StatusCode, resp.Header, b))
	}
	require.Empty(t, c.Unexercised("notifier"), "routes of the notifier no exchange used")
}
