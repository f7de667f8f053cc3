package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/docs"
	"github.com/waitroom/waitroom/pkg/security/assertion"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/services/api/waitpage"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// TestServedRoutesAreTheSpecs: every route the api's engine serves (built as
// Run builds it) is in docs/openapi.yaml for the api, and every route the
// spec gives the api is served.
func TestServedRoutesAreTheSpecs(t *testing.T) {
	reg := httpserver.NewRegistry()
	engine := httpserver.New(zap.NewNop(), reg, &httpserver.Readiness{})
	httpapi.Mount(engine, httpapi.NewServer(nil, nil, nil, nil, nil, httpapi.Options{}, reg, zap.NewNop()), &waitpage.Pages{})
	require.NoError(t, docs.CheckRoutes(context.Background(), "api", engine.Routes()))
}

// contract sends requests to the api and checks each exchange against the
// spec (docs.Contract).
type contract struct {
	t  *testing.T
	s  *api
	c  *docs.Contract
	ip atomic.Int32 // a fresh client address per request, so the throttle counts only its own case
}

func newContract(t *testing.T, s *api) *contract {
	c, err := docs.NewContract(context.Background(), s.url)
	require.NoError(t, err)
	return &contract{t: t, s: s, c: c}
}

// exchange sends the request, checks its status (and error code, when
// wantCode names one), validates the exchange against the spec and returns
// the answer. malformed skips the request's validation: the case sends a bad
// one on purpose.
func (c *contract) exchange(method, path, body string, malformed bool, want int, wantCode string, hdr ...string) answer {
	c.t.Helper()
	if len(hdr) == 0 || hdr[0] != "X-Forwarded-For" {
		hdr = append([]string{"X-Forwarded-For", fmt.Sprintf("198.51.100.%d", c.ip.Add(1)%250+1)}, hdr...)
	}
	if body != "" {
		hdr = append(hdr, "Content-Type", "application/json")
	}
	a := c.s.do(method, path, []byte(body), hdr...)
	require.Equal(c.t, want, a.Code, "%s %s: %s", method, path, a.Body)
	if wantCode != "" {
		require.Equal(c.t, wantCode, a.errCode(c.t), "%s %s", method, path)
	}
	req, err := http.NewRequest(method, c.s.url+path, nil)
	require.NoError(c.t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	require.NoError(c.t, c.c.Check(context.Background(), req, []byte(body), malformed, a.Code, a.Header, a.Body))
	return a
}

// TestAnswersMatchTheSpec runs the api's routes through their answers, good
// and bad, over real HTTP (Redis, kfake), and validates every exchange
// against docs/openapi.yaml.
func TestAnswersMatchTheSpec(t *testing.T) {
	closed, sold, reject, pow := item("closed"), item("gone"), item("shut"), item("hard")
	closed.Enabled, sold.Stock = false, 0
	reject.Mode, reject.RejectMessage = topics.ModeReject, "back at nine"
	pow.PowDifficulty = 4
	s := newAPIWith(t, func(c *httpapi.Config) {
		c.Throttle = httpapi.ThrottleConfig{IPRate: 3, Period: time.Minute}
		c.TrustedProxies = []string{"127.0.0.1"} // the exchanges come through a front door, each from its own address
		c.SignalToken = "site-secret"
	}, item("shoe"), item("other"), closed, sold, reject, pow)
	c := newContract(t, s)
	const reg = "/api/v1/items/shoe/registrations"

	// register
	var r httpapi.RegisterResponse
	c.exchange("POST", reg, `{"userId":"alice"}`, false, 202, "").decode(t, &r)
	require.Equal(t, "QUEUED", r.Status)
	c.exchange("POST", reg, ``, false, 202, "")
	c.exchange("POST", reg, `{"userId":42}`, true, 400, "INVALID_JSON")
	c.exchange("POST", reg, `{"userId":"al ice"}`, true, 400, "INVALID_USER_ID")
	c.exchange("POST", "/api/v1/items/t%7Bx%7D/registrations", `{}`, false, 400, "INVALID_ITEM_ID")
	c.exchange("POST", reg, `{"bypass":"not-a-code"}`, false, 409, "BYPASS_DISABLED")
	c.exchange("POST", reg, `{"assertion":"a.b.c"}`, false, 409, "ASSERTIONS_DISABLED")
	c.exchange("POST", reg, `{"userId":"`+strings.Repeat("a", 5000)+`"}`, true, 413, "BODY_TOO_LARGE")
	c.exchange("POST", "/api/v1/items/nope/registrations", `{}`, false, 404, "ITEM_NOT_FOUND")
	c.exchange("POST", "/api/v1/items/closed/registrations", `{}`, false, 409, "QUEUE_CLOSED")
	c.exchange("POST", "/api/v1/items/shut/registrations", `{}`, false, 409, "REGISTRATION_REJECTED")
	c.exchange("POST", "/api/v1/items/gone/registrations", `{}`, false, 410, "SOLD_OUT")
	c.exchange("POST", "/api/v1/items/hard/registrations", `{}`, false, 403, "POW_REQUIRED")
	c.exchange("POST", "/api/v1/items/hard/registrations", `{"pow":{"challenge":"x","solution":"y"}}`, false, 403, "POW_INVALID")
	for range 3 {
		c.exchange("POST", reg, `{}`, false, 202, "", "X-Forwarded-For", "203.0.113.9")
	}
	c.exchange("POST", reg, `{}`, false, 429, "RATE_LIMITED", "X-Forwarded-For", "203.0.113.9")

	// challenge
	c.exchange("GET", "/api/v1/items/shoe/challenge", "", false, 200, "")
	var ch httpapi.ChallengeResponse
	c.exchange("GET", "/api/v1/items/hard/challenge", "", false, 200, "").decode(t, &ch)
	require.Equal(t, 4, ch.Difficulty)
	c.exchange("GET", "/api/v1/items/nope/challenge", "", false, 404, "ITEM_NOT_FOUND")
	c.exchange("GET", "/api/v1/items/t%7Bx%7D/challenge", "", false, 400, "INVALID_ITEM_ID")

	// status: by path, by ?token=, by bearer; then waiting and admitted
	var st httpapi.StatusResponse
	_, q := s.register("shoe", "bob")
	tok, _ := s.signer.IssueQueue(q, time.Hour)
	c.exchange("GET", reg+"/"+tok, "", false, 200, "").decode(t, &st)
	require.Equal(t, "PENDING", st.Status)
	s.apply(q)
	c.exchange("GET", reg+"/current?token="+tok, "", false, 200, "").decode(t, &st)
	require.Equal(t, "WAITING", st.Status)
	require.NotEmpty(t, st.Cursor, "a WAITING answer carries its cursor")
	// A cursor sent back (on another item: a second read caches the item's motion).
	_, qo := s.register("other", "bob")
	s.apply(qo)
	otok, _ := s.signer.IssueQueue(qo, time.Hour)
	var ost httpapi.StatusResponse
	c.exchange("GET", "/api/v1/items/other/registrations/"+otok, "", false, 200, "").decode(t, &ost)
	c.exchange("GET", "/api/v1/items/other/registrations/"+otok+"?cursor="+ost.Cursor, "", false, 200, "").decode(t, &ost)
	require.Equal(t, "WAITING", ost.Status)
	s.admit("shoe")
	s.ack("shoe")
	c.exchange("GET", reg+"/current", "", false, 200, "", "Authorization", "Bearer "+tok).decode(t, &st)
	require.Equal(t, "ADMITTED", st.Status)
	admission := st.AdmissionToken
	c.exchange("GET", reg+"/current", "", false, 401, "TOKEN_MISSING")
	c.exchange("GET", reg+"/not.a.token", "", false, 401, "TOKEN_INVALID")
	c.exchange("GET", "/api/v1/items/other/registrations/"+tok, "", false, 403, "TOKEN_ITEM_MISMATCH")
	c.exchange("GET", "/api/v1/items/t%7Bx%7D/registrations/"+tok, "", false, 400, "INVALID_ITEM_ID")

	// verify and complete
	c.exchange("POST", "/api/v1/admissions/verify", `{"token":"`+admission+`","itemId":"shoe"}`, false, 200, "")
	c.exchange("POST", "/api/v1/admissions/verify", `{"itemId":"shoe"}`, false, 200, "", "Authorization", "Bearer "+admission)
	c.exchange("POST", "/api/v1/admissions/verify", `{"token":"`+admission+`","itemId":"other"}`, false, 403, "TOKEN_ITEM_MISMATCH")
	c.exchange("POST", "/api/v1/admissions/verify", `{"token":"`+admission+`"}`, true, 400, "ITEM_ID_MISSING")
	c.exchange("POST", "/api/v1/admissions/verify", `{"itemId":"shoe"}`, false, 401, "TOKEN_MISSING")
	c.exchange("POST", "/api/v1/admissions/verify", `{"token":"x.y.z","itemId":"shoe"}`, false, 401, "TOKEN_INVALID")
	c.exchange("POST", "/api/v1/admissions/verify", `{"token":1}`, true, 400, "INVALID_JSON")
	c.exchange("POST", "/api/v1/admissions/verify", `{"token":"`+strings.Repeat("a", 5000)+`","itemId":"shoe"}`, false, 413, "BODY_TOO_LARGE")
	var done httpapi.AdmissionResponse
	c.exchange("POST", "/api/v1/admissions/complete", `{"token":"`+admission+`","itemId":"shoe"}`, false, 200, "").decode(t, &done)
	require.Equal(t, "COMPLETED", done.Status)
	c.exchange("POST", "/api/v1/admissions/complete", `{"token":"`+admission+`","itemId":"shoe"}`, false, 410, "ADMISSION_ENDED")
	c.exchange("POST", "/api/v1/admissions/verify", `{"token":"`+admission+`","itemId":"shoe"}`, false, 410, "ADMISSION_ENDED")
	c.exchange("GET", reg+"/"+tok, "", false, 200, "").decode(t, &st)
	require.Equal(t, "COMPLETED", st.Status)

	// leave
	c.exchange("DELETE", reg+"/"+r.Token, "", false, 202, "").decode(t, &st)
	require.Equal(t, "LEFT", st.Status)
	c.exchange("DELETE", reg+"/not.a.token", "", false, 401, "TOKEN_INVALID")

	// a blocked user: refused at the door, its place answers BLOCKED
	_, carol := s.register("shoe", "carol")
	carolTok, _ := s.signer.IssueQueue(carol, time.Hour)
	s.publish(block(t, "user:carol", "resale", 0))
	require.Eventually(t, func() bool {
		a := s.do("GET", reg+"/"+carolTok, nil)
		return a.Code == 200 && strings.Contains(string(a.Body), `"BLOCKED"`)
	}, 10*time.Second, 20*time.Millisecond)
	c.exchange("GET", reg+"/"+carolTok, "", false, 200, "").decode(t, &st)
	require.Equal(t, "BLOCKED", st.Status)
	c.exchange("POST", reg, `{"userId":"carol"}`, false, 403, "BLOCKED")

	// the site's health signal
	const sig = `{"instance":"web-1","windowMs":2000,"boundsMs":[50,100],"counts":[3,2,1],"errors":1,"arrivals":2,"arrivalDelayMsSum":900,"active":4}`
	c.exchange("POST", "/api/v1/items/shoe/signal", sig, false, 204, "", "Authorization", "Bearer site-secret")
	c.exchange("POST", "/api/v1/items/shoe/signal", sig, false, 401, "UNAUTHORIZED")
	c.exchange("POST", "/api/v1/items/shoe/signal", `{"instance":"web-1","windowMs":2000,"counts":[1],"errors":2}`, false, 400, "INVALID_SIGNAL", "Authorization", "Bearer site-secret")
	c.exchange("POST", "/api/v1/items/t%7Bx%7D/signal", sig, false, 400, "INVALID_ITEM_ID", "Authorization", "Bearer site-secret")

	// the keys, the pages, health
	c.exchange("GET", "/.well-known/jwks.json", "", false, 200, "")
	c.exchange("GET", "/items/shoe/wait", "", false, 200, "")
	c.exchange("GET", "/items/shoe/admitted?admission="+admission, "", false, 200, "")
	c.exchange("GET", "/items/t%7Bx%7D/wait", "", false, 400, "INVALID_ITEM_ID")
	c.exchange("GET", "/waitroom.js", "", false, 200, "")
	c.exchange("GET", "/waitroom-pow.js", "", false, 200, "")
	c.exchange("GET", "/healthz", "", false, 200, "")
	c.exchange("GET", "/readyz", "", false, 200, "")
	c.exchange("GET", "/metrics", "", false, 200, "")

	require.Empty(t, c.c.Unexercised("api"), "routes of the api no exchange used")
}

// TestProvenAnswersMatchTheSpec: the answers of an api that requires
// site-signed assertions (the ASSERTION_* refusals, a proven registration and
// a proven user's place resumed from a second device: DUPLICATE read back
// with the place's own token) validate against docs/openapi.yaml.
func TestProvenAnswersMatchTheSpec(t *testing.T) {
	jwks, sign := siteJWKS(t)
	s := newAPIWith(t, func(c *httpapi.Config) {
		c.Assertion = assertion.Config{Issuer: "shop", JWKSURL: jwks, Required: true, MaxTTL: 10 * time.Minute}
	}, item("tix"))
	c := newContract(t, s)
	const reg = "/api/v1/items/tix/registrations"
	body := func(assertion string) string { return `{"assertion":"` + assertion + `"}` }

	c.exchange("POST", reg, `{"userId":"carol"}`, false, 401, "ASSERTION_REQUIRED")
	c.exchange("POST", reg, body("x.y.z"), false, 401, "ASSERTION_INVALID")
	late := siteClaims("carol", "tix")
	late["iat"], late["exp"] = time.Now().Add(-2*time.Minute).Unix(), time.Now().Add(-time.Minute).Unix()
	c.exchange("POST", reg, body(sign(late)), false, 401, "ASSERTION_EXPIRED")
	c.exchange("POST", reg, `{"userId":"dave","assertion":"`+sign(siteClaims("carol", "tix"))+`"}`, false, 400, "ASSERTION_USER_MISMATCH")

	first := sign(siteClaims("carol", "tix"))
	var a, b httpapi.RegisterResponse
	c.exchange("POST", reg, body(first), false, 202, "").decode(t, &a)
	c.exchange("POST", reg, body(first), false, 401, "ASSERTION_REUSED")
	c.exchange("POST", reg, body(sign(siteClaims("carol", "tix"))), false, 202, "").decode(t, &b)
	for _, tok := range []string{a.Token, b.Token} {
		q, err := s.signer.ParseQueue(tok)
		require.NoError(t, err)
		s.apply(q)
	}
	var st httpapi.StatusResponse
	c.exchange("GET", reg+"/"+b.Token, "", false, 200, "").decode(t, &st)
	require.Equal(t, "WAITING", st.Status, "the second device's token resumes the place")
	require.NotEmpty(t, st.Token, "with the place's own token")
	require.Equal(t, a.TokenID, st.TokenID)
}
