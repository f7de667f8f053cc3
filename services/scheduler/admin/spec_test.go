package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/docs"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/security/bypass"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/scheduler/admin"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// TestServedRoutesAreTheSpecs: every route of the scheduler's engine (the
// httpserver shell and the admin API with its console, as promote.Run
// builds it) is in docs/openapi.yaml for the scheduler, and every route the
// spec gives the scheduler is served.
func TestServedRoutesAreTheSpecs(t *testing.T) {
	engine := httpserver.New(zap.NewNop(), httpserver.NewRegistry(), &httpserver.Readiness{})
	admin.New(nil, nil, nil, "", zap.NewNop()).Routes(engine)
	require.NoError(t, docs.CheckRoutes(context.Background(), "scheduler", engine.Routes()))
}

// TestAnswersMatchTheSpec runs every route of the admin API and the console
// through good and bad answers over real HTTP (Redis, kfake) and validates
// each exchange against docs/openapi.yaml.
func TestAnswersMatchTheSpec(t *testing.T) {
	priv, err := bypass.ParsePrivate(bypassSeed)
	require.NoError(t, err)
	e := newEnv(t, fakes{bypass: priv})
	e.seed(topics.ItemState{ItemID: "drop", Name: "Drop", Stock: 10, Enabled: true,
		Policy: topics.AdmissionPolicy{RatePerSecond: 5, MaxActive: 10, SessionTTLSeconds: 60}, Version: 1})
	e.register("drop", 3)
	e.deadLetter(2, fmt.Errorf("%w: unknown item %q", topics.ErrInvalid, "ghost"), ghost)
	c, err := docs.NewContract(context.Background(), e.url)
	require.NoError(t, err)
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	bearer := []string{"Authorization", "Bearer " + token}
	// send sends one request, checks its status (and error code) and the
	// exchange against the spec, and returns the answer's body and cookies.
	send := func(method, path, body string, malformed bool, want int, wantCode string, hdr ...string) ([]byte, []*http.Cookie) {
		t.Helper()
		req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, path, b)
		if wantCode != "" {
			var eb httpserver.ErrorBody
			require.NoError(t, json.Unmarshal(b, &eb), "%s", b)
			require.Equal(t, wantCode, eb.Error.Code, "%s %s: %s", method, path, b)
		}
		req.Body = nil
		require.NoError(t, c.Check(context.Background(), req, []byte(body), malformed, resp.StatusCode, resp.Header, b))
		return b, resp.Cookies()
	}
	const p = admin.Prefix
	admin := func(method, path, body string, malformed bool, want int, wantCode string) []byte {
		t.Helper()
		b, _ := send(method, p+path, body, malformed, want, wantCode, bearer...)
		return b
	}

	// items
	admin("GET", "/items", "", false, 200, "")
	admin("GET", "/items/drop", "", false, 200, "")
	admin("GET", "/items/nope", "", false, 404, "ITEM_NOT_FOUND")
	admin("GET", "/items/t%7Bx%7D", "", false, 400, "INVALID_ITEM_ID")
	admin("POST", "/items/fresh", `{"name":"Fresh","stock":5,"enabled":true,"powDifficulty":8,"idleTimeoutSeconds":120}`, false, 200, "")
	admin("POST", "/items/fresh", `{"stock":"x"}`, true, 400, "INVALID_JSON")
	admin("POST", "/items/fresh", `{"stock":-5}`, false, 400, "INVALID_ITEM")
	admin("POST", "/items/fresh", `{"mode":"random"}`, false, 409, "DRAWS_DISABLED")
	admin("POST", "/items/fresh", `{"name":"`+strings.Repeat("n", 700000)+`"}`, true, 413, "BODY_TOO_LARGE")
	admin("PUT", "/items/drop/admission", `{"ratePerSecond":2,"paused":true}`, false, 200, "")
	admin("PUT", "/items/drop/admission", `{}`, true, 400, "INVALID_POLICY")
	admin("PUT", "/items/nope/admission", `{"maxActive":3}`, false, 404, "ITEM_NOT_FOUND")
	admin("GET", "/stats", "", false, 200, "")

	// bypass codes
	admin("POST", "/items/drop/bypass", `{"count":3,"ttlSeconds":3600}`, false, 200, "")
	admin("POST", "/items/drop/bypass", `{"count":0,"ttlSeconds":3600}`, false, 400, "INVALID_BYPASS")
	admin("POST", "/items/nope/bypass", `{"count":1,"ttlSeconds":60}`, false, 404, "ITEM_NOT_FOUND")
	admin("GET", "/items/drop/bypass", "", false, 200, "")

	// dead letters
	var l dlq.List
	require.NoError(t, json.Unmarshal(admin("GET", "/dlq", "", false, 200, ""), &l))
	require.Len(t, l.Entries, 2)
	admin("GET", "/dlq/"+l.Entries[0].ID(), "", false, 200, "")
	admin("GET", "/dlq/0/999", "", false, 404, "NOT_FOUND")
	admin("GET", "/dlq/x/1", "", false, 400, "INVALID_PATH")
	admin("GET", "/dlq?limit=0", "", false, 400, "INVALID_QUERY")
	admin("GET", "/dlq?topic=orders", "", false, 400, "INVALID_TOPIC")
	admin("GET", "/dlq?topic=nope.dlq", "", false, 404, "TOPIC_NOT_FOUND")
	admin("GET", "/dlq?errorType=OOPS", "", true, 400, "INVALID_FILTER")
	admin("POST", "/dlq/replay", `{"dryRun":true}`, false, 200, "")
	admin("POST", "/dlq/replay", `{"rate":-1}`, false, 400, "INVALID_FILTER")

	// blocks
	admin("POST", "/blocks", `{"subject":"user:mallory","reason":"bot","forSeconds":60}`, false, 200, "")
	admin("POST", "/blocks", `{"subject":"mallory"}`, false, 400, "INVALID_BLOCK")
	admin("GET", "/blocks", "", false, 200, "")
	admin("DELETE", "/blocks?subject=user:mallory", "", false, 200, "")
	admin("DELETE", "/blocks?subject=mallory", "", false, 400, "INVALID_BLOCK")

	// no token
	send("GET", p+"/items", "", false, 401, "UNAUTHORIZED")
	send("GET", p+"/items", "", false, 401, "UNAUTHORIZED", "Authorization", "Bearer wrong")

	// the console: sign in (wrong, right), the stream without a session, sign out
	send("GET", "/admin", "", false, 200, "")
	form := "application/x-www-form-urlencoded"
	send("POST", "/admin/login", "token=wrong", false, 303, "", "Content-Type", form)
	_, cookies := send("POST", "/admin/login", "token="+token, false, 303, "", "Content-Type", form)
	require.NotEmpty(t, cookies, "signed in: a session cookie")
	send("GET", "/admin/events", "", false, 401, "UNAUTHORIZED")
	send("POST", "/admin/logout", "", false, 303, "", "Cookie", cookies[0].Name+"="+cookies[0].Value)

	// health: this harness never says ready
	send("GET", "/healthz", "", false, 200, "")
	send("GET", "/readyz", "", false, 503, "NOT_READY")
	send("GET", "/metrics", "", false, 200, "")

	require.Empty(t, c.Unexercised("scheduler"), "routes of the scheduler no exchange used")
}
