package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/api/httpapi"
)

// Bad requests get the exact status and error code, and the server keeps serving.
func TestBadRequests(t *testing.T) {
	closed, sold := item("closed"), item("gone")
	closed.Enabled, sold.Stock = false, 0
	e := newAPI(t, item("tix"), item("other"), closed, sold)
	good, _ := e.register("tix", "alice")
	otherItem, _ := e.register("other", "alice")
	forger, err := token.New(token.HS256, "a-different-key-a-different-key-!!", "k1")
	require.NoError(t, err)
	forged, err := forger.IssueQueue(token.Queue{TokenID: "X", ItemID: "tix", UserID: "mallory"}, time.Hour)
	require.NoError(t, err)
	expired, err := e.signer.IssueQueue(token.Queue{TokenID: "X", ItemID: "tix", UserID: "late"}, -time.Hour)
	require.NoError(t, err)

	reg := "/api/v1/items/tix/registrations"
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		code                     int
		errCode                  string
	}{
		{"malformed json", "POST", reg, `{"userId":`, nil, 400, "INVALID_JSON"},
		{"not an object", "POST", reg, `["alice"]`, nil, 400, "INVALID_JSON"},
		{"wrong type", "POST", reg, `{"userId":42}`, nil, 400, "INVALID_JSON"},
		{"unknown field", "POST", reg, `{"userId":"a","admin":true}`, nil, 400, "INVALID_JSON"},
		{"two objects", "POST", reg, `{"userId":"a"}{"userId":"b"}`, nil, 400, "INVALID_JSON"},
		{"empty user id", "POST", reg, `{"userId":""}`, nil, 202, ""}, // empty means: make one
		{"bad user id", "POST", reg, `{"userId":"al ice"}`, nil, 400, "INVALID_USER_ID"},
		{"long user id", "POST", reg, `{"userId":"` + strings.Repeat("u", 65) + `"}`, nil, 400, "INVALID_USER_ID"},
		{"bad item id", "POST", "/api/v1/items/t%7Bx%7D/registrations", `{}`, nil, 400, "INVALID_ITEM_ID"},
		{"long item id", "POST", "/api/v1/items/" + strings.Repeat("i", 65) + "/registrations", `{}`, nil, 400, "INVALID_ITEM_ID"},
		{"reserved item id", "POST", "/api/v1/items/view/registrations", `{}`, nil, 400, "INVALID_ITEM_ID"},
		{"status of a reserved item id", "GET", "/api/v1/items/view/registrations/" + good.Token, "", nil, 400, "INVALID_ITEM_ID"},
		{"oversize body", "POST", reg, `{"userId":"` + strings.Repeat("a", 5000) + `"}`, nil, 413, "BODY_TOO_LARGE"},
		{"unknown item", "POST", "/api/v1/items/nope/registrations", `{}`, nil, 404, "ITEM_NOT_FOUND"},
		{"closed item", "POST", "/api/v1/items/closed/registrations", `{}`, nil, 409, "QUEUE_CLOSED"},
		{"sold out", "POST", "/api/v1/items/gone/registrations", `{}`, nil, 410, "SOLD_OUT"},
		{"forged token", "GET", reg + "/" + forged, "", nil, 401, "TOKEN_INVALID"},
		{"garbage token", "GET", reg + "/not.a.token", "", nil, 401, "TOKEN_INVALID"},
		{"expired token", "GET", reg + "/" + expired, "", nil, 401, "TOKEN_EXPIRED"},
		{"token of another item", "GET", reg + "/" + otherItem.Token, "", nil, 403, "TOKEN_ITEM_MISMATCH"},
		{"leave with another item's token", "DELETE", reg + "/" + otherItem.Token, "", nil, 403, "TOKEN_ITEM_MISMATCH"},
		{"forged bearer", "GET", reg + "/current", "", []string{"Authorization", "Bearer " + forged}, 401, "TOKEN_INVALID"},
		{"wrong method", "PUT", reg, `{}`, nil, 405, "METHOD_NOT_ALLOWED"},
		{"no route", "GET", "/api/v1/nothing", "", nil, 404, "NOT_FOUND"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := e.do(c.method, c.path, []byte(c.body), c.hdr...)
			require.Equal(t, c.code, a.Code, "body %s", a.Body)
			if c.errCode == "" {
				return
			}
			var body httpserver.ErrorBody
			a.decode(t, &body)
			assert.Equal(t, c.errCode, body.Error.Code)
			assert.NotEmpty(t, body.Error.Message)
		})
	}
	a := e.do(http.MethodPost, "/api/v1/items/view/registrations", nil)
	assert.JSONEq(t, `{"error":{"code":"INVALID_ITEM_ID","message":"itemId \"view\" is reserved: its Redis keys wr:{view}:… are the view marker's"}}`, string(a.Body))
	// Still serving, and the good token still works, also as a bearer.
	e.register("tix", "bob")
	a = e.do(http.MethodGet, reg+"/current", nil, "Authorization", "Bearer "+good.Token)
	require.Equal(t, http.StatusOK, a.Code, "%s", a.Body)
}

// Admitted users get an admission token that the order service can verify
// and complete; verify refuses completed, forged, queue and other-item
// tokens; the JWKS verifies admission tokens offline.
func TestAdmissionTokenLifecycle(t *testing.T) {
	e := newAPI(t, item("tix"), item("other"))
	r, q := e.register("tix", "alice")
	assert.Equal(t, "PENDING", e.status("tix", r.Token).Status, "the consumer has not applied it")
	e.apply(q)
	st := e.status("tix", r.Token)
	require.Equal(t, "WAITING", st.Status)
	assert.Equal(t, int64(1), st.Position)
	require.NotNil(t, st.EtaSeconds)
	e.admit("tix")
	e.ack("tix")
	st = e.status("tix", r.Token)
	require.Equal(t, "ADMITTED", st.Status)
	require.NotEmpty(t, st.AdmissionToken)
	exp, err := time.Parse(time.RFC3339Nano, st.ExpiresAt)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(60*time.Second), exp, 5*time.Second)

	a := e.post("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "tix"})
	require.Equal(t, http.StatusOK, a.Code, "%s", a.Body)
	var v httpapi.AdmissionResponse
	a.decode(t, &v)
	assert.True(t, v.Valid)
	assert.Equal(t, "alice", v.UserID)
	a = e.do(http.MethodPost, "/api/v1/admissions/verify", []byte(`{"itemId":"tix"}`), "Authorization", "Bearer "+st.AdmissionToken)
	assert.Equal(t, http.StatusOK, a.Code, "as a bearer: %s", a.Body)

	forger, err := token.New(token.EdDSA, "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "a1")
	require.NoError(t, err)
	forged, err := forger.IssueAdmission(token.Admission{TokenID: v.TokenID, ItemID: "tix", UserID: "alice", ExpiresAt: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	for name, c := range map[string]struct {
		req  httpapi.AdmissionRequest
		code int
		err  string
	}{
		"other item":  {httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "other"}, 403, "TOKEN_ITEM_MISMATCH"},
		"bad item":    {httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "o ther"}, 400, "INVALID_ITEM_ID"},
		"forged":      {httpapi.AdmissionRequest{Token: forged, ItemID: "tix"}, 401, "TOKEN_INVALID"},
		"queue token": {httpapi.AdmissionRequest{Token: r.Token, ItemID: "tix"}, 401, "TOKEN_INVALID"},
		"no token":    {httpapi.AdmissionRequest{ItemID: "tix"}, 401, "TOKEN_MISSING"},
		"no item":     {httpapi.AdmissionRequest{Token: st.AdmissionToken}, 400, "ITEM_ID_MISSING"},
		"nothing":     {httpapi.AdmissionRequest{}, 400, "ITEM_ID_MISSING"},
	} {
		a := e.post("/api/v1/admissions/verify", c.req)
		assert.Equal(t, c.code, a.Code, "%s: %s", name, a.Body)
		assert.Equal(t, c.err, a.errCode(t), name)
	}

	for _, body := range []string{`{"token":"` + st.AdmissionToken + `"}`, `{"token":"` + st.AdmissionToken + `","itemId":""}`, ``} {
		a = e.do(http.MethodPost, "/api/v1/admissions/complete", []byte(body), "Authorization", "Bearer "+st.AdmissionToken)
		require.Equal(t, http.StatusBadRequest, a.Code, "complete without itemId %q: %s", body, a.Body)
		assert.JSONEq(t, `{"error":{"code":"ITEM_ID_MISSING","message":"field \"itemId\" is required: the item the admission must be for"}}`, string(a.Body))
	}
	a = e.post("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "tix"})
	require.Equal(t, http.StatusOK, a.Code, "complete without itemId changed nothing: %s", a.Body)
	a = e.post("/api/v1/admissions/complete", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "other"})
	require.Equal(t, http.StatusForbidden, a.Code, "%s", a.Body)
	a = e.post("/api/v1/admissions/complete", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "tix"})
	require.Equal(t, http.StatusOK, a.Code, "%s", a.Body)
	assert.Equal(t, "COMPLETED", e.status("tix", r.Token).Status, "the api frees the place at once")
	a = e.post("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "tix"})
	assert.Equal(t, http.StatusGone, a.Code)
	assert.Equal(t, "ADMISSION_ENDED", a.errCode(t))
	a = e.post("/api/v1/admissions/complete", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "tix"})
	assert.Equal(t, http.StatusGone, a.Code, "completing twice")

	a = e.do(http.MethodGet, "/.well-known/jwks.json", nil)
	require.Equal(t, http.StatusOK, a.Code)
	var set token.JWKS
	a.decode(t, &set)
	require.Len(t, set.Keys, 1)
	assert.Equal(t, "Ed25519", set.Keys[0].Crv)
}

// Leaving answers LEFT at once (the consumer applies it from Kafka).
func TestLeave(t *testing.T) {
	e := newAPI(t, item("tix"))
	r, _ := e.register("tix", "alice")
	a := e.do(http.MethodDelete, "/api/v1/items/tix/registrations/"+r.Token, nil)
	require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
	var st httpapi.StatusResponse
	a.decode(t, &st)
	assert.Equal(t, "LEFT", st.Status)
	assert.Equal(t, r.TokenID, st.TokenID)
}

// The waiting-room page names the item, and "Continue" leads by default to
// the api's admitted page.
func TestPages(t *testing.T) {
	show := item("show")
	show.Name = "Front-row show"
	e := newAPI(t, show)
	a := e.do(http.MethodGet, "/items/show/wait", nil)
	require.Equal(t, http.StatusOK, a.Code)
	assert.Contains(t, string(a.Body), "Front-row show")
	assert.Contains(t, string(a.Body), `/items/{itemId}/admitted?admission={admissionToken}`)
	a = e.do(http.MethodGet, "/items/show/admitted?admission=x", nil)
	require.Equal(t, http.StatusOK, a.Code)
	assert.Contains(t, string(a.Body), "Front-row show")
	a = e.do(http.MethodGet, "/items/no%20pe/wait", nil)
	assert.Equal(t, http.StatusBadRequest, a.Code)

	// The page is drawn over waitroom.js, which the api serves to any site.
	a = e.do(http.MethodGet, "/items/show/wait", nil)
	assert.Contains(t, string(a.Body), `<script src="/waitroom.js"></script>`)
	a = e.do(http.MethodGet, "/waitroom.js", nil)
	require.Equal(t, http.StatusOK, a.Code)
	assert.Contains(t, string(a.Body), "global.Waitroom = { join, FINAL }")
}

// A registration's 202 is byte for byte what encoding/json writes for its
// RegisterResponse; its token verifies for the registration, and its
// statusUrl and eventsUrl are that token's paths. Registrations at once each
// get their own (the token and its URLs are written in a pooled buffer).
func TestRegisterAnswersItsOwnTokenAndURLs(t *testing.T) {
	e := newAPI(t, item("urls"))
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for j := range 8 {
				user := fmt.Sprintf("u-%d-%d", i, j)
				a := e.do(http.MethodPost, "/api/v1/items/urls/registrations", []byte(`{"userId":"`+user+`"}`))
				if !assert.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body) {
					return
				}
				var r httpapi.RegisterResponse
				if !assert.NoError(t, json.Unmarshal(a.Body, &r)) {
					return
				}
				want, err := json.Marshal(r)
				assert.NoError(t, err)
				assert.Equal(t, string(want), string(a.Body))
				q, err := e.signer.ParseQueue(r.Token)
				if assert.NoError(t, err) {
					assert.Equal(t, user, q.UserID)
					assert.Equal(t, r.TokenID, q.TokenID)
					assert.Equal(t, "urls", q.ItemID)
				}
				assert.Equal(t, user, r.UserID)
				assert.Equal(t, "/api/v1/items/urls/registrations/"+r.Token, r.StatusURL)
				assert.Equal(t, r.StatusURL+"/events", r.EventsURL)
			}
		})
	}
	wg.Wait()
}
