package stack_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/topics"
)

func policy(id string, rate float64, maxActive, ttl int64) topics.ItemState {
	it := item(id)
	it.Policy = topics.AdmissionPolicy{RatePerSecond: rate, MaxActive: maxActive, SessionTTLSeconds: ttl}
	return it
}

// waitStatus polls a registration until its status is want.
func (e *env) waitStatus(itemID, tok, want string) httpapi.StatusResponse {
	e.t.Helper()
	var st httpapi.StatusResponse
	require.Eventually(e.t, func() bool {
		st = e.status(itemID, tok)
		return st.Status == want
	}, 20*time.Second, 20*time.Millisecond, "never %s (last %+v)", want, st)
	return st
}

// waitNotPending polls a registration until the consumer has applied it.
func (e *env) waitNotPending(itemID, tok string) httpapi.StatusResponse {
	e.t.Helper()
	var st httpapi.StatusResponse
	require.Eventually(e.t, func() bool {
		st = e.status(itemID, tok)
		return st.Status != "PENDING"
	}, 20*time.Second, 20*time.Millisecond, "never applied (last %+v)", st)
	return st
}

func (e *env) admissionCall(path string, body any) answer {
	e.t.Helper()
	b, err := json.Marshal(body)
	require.NoError(e.t, err)
	return e.do(http.MethodPost, path, b)
}

func errCode(t *testing.T, a answer) string {
	t.Helper()
	var body httpserver.ErrorBody
	a.decode(t, &body)
	return body.Error.Code
}

// Through the whole pipeline, admitted users get an admission token that the
// order service can verify and complete, and the consumer's replay of the
// completion revives nothing. (The api's refusals are tested with the api:
// services/api/httpapi.)
func TestAdmissionTokenLifecycle(t *testing.T) {
	e := newEnv(t, policy("tix", 50, 0, 60), policy("other", 50, 0, 60))
	e.start()
	r, _ := e.register("tix", "alice")
	st := e.waitStatus("tix", r.Token, "ADMITTED")
	require.NotEmpty(t, st.AdmissionToken)
	exp, err := time.Parse(time.RFC3339Nano, st.ExpiresAt)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(60*time.Second), exp, 5*time.Second)

	a := e.admissionCall("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "tix"})
	require.Equal(t, http.StatusOK, a.Code, "%s", a.Body)
	var v httpapi.AdmissionResponse
	a.decode(t, &v)
	assert.True(t, v.Valid)
	assert.Equal(t, "alice", v.UserID)

	a = e.admissionCall("/api/v1/admissions/complete", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "tix"})
	require.Equal(t, http.StatusOK, a.Code, "%s", a.Body)
	a = e.admissionCall("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "tix"})
	assert.Equal(t, http.StatusGone, a.Code)
	assert.Equal(t, "ADMISSION_ENDED", errCode(t, a))
	a = e.admissionCall("/api/v1/admissions/complete", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: "tix"})
	assert.Equal(t, http.StatusGone, a.Code, "completing twice")
	// The consumer applies the completion from Kafka too: it must not revive
	// anything. Registrations and completions of an item share a partition, so
	// once a later registration of tix is in the line, the consumer is past it.
	later, _ := e.register("tix", "bob")
	e.waitNotPending("tix", later.Token)
	assert.Equal(t, "COMPLETED", e.status("tix", r.Token).Status)
}

// Sessions end after sessionTTL and free their places; complete frees one at
// once; the next in line gets it.
func TestSessionsExpireAndCompleteFreesAPlace(t *testing.T) {
	e := newEnv(t, policy("one", 100, 1, 1)) // one place, 1 s sessions
	e.start()
	a, _ := e.register("one", "a")
	b, _ := e.register("one", "b")
	c, _ := e.register("one", "c")
	sa := e.waitStatus("one", a.Token, "ADMITTED")
	assert.Equal(t, "WAITING", e.status("one", b.Token).Status, "one place: b waits")
	// a's session runs out: b is admitted, a is expired and verify refuses it.
	sb := e.waitStatus("one", b.Token, "ADMITTED")
	assert.Equal(t, "EXPIRED", e.status("one", a.Token).Status)
	v := e.admissionCall("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: sa.AdmissionToken, ItemID: "one"})
	assert.Contains(t, []int{http.StatusGone, http.StatusUnauthorized}, v.Code, "%s", v.Body)
	// b completes at once: c gets the place without waiting for b's session to end.
	done := e.admissionCall("/api/v1/admissions/complete", httpapi.AdmissionRequest{Token: sb.AdmissionToken, ItemID: "one"})
	require.Equal(t, http.StatusOK, done.Code, "%s", done.Body)
	sc := e.waitStatus("one", c.Token, "ADMITTED")
	assert.NotEmpty(t, sc.AdmissionToken)
}

// A waiting user sees an ETA; the admin API pauses and resumes admission,
// effective within a tick, and refuses callers without the token.
//
// "Nobody admitted while paused" is only checked after a control item, which
// admits at once, has admitted someone registered after the paused item's
// people were in line: that tick would have admitted them too.
func TestAdminPausesAndResumes(t *testing.T) {
	e := newEnv(t, policy("sale", 0, 0, 60), policy("ctl", 50, 0, 60)) // sale paused from the start
	e.start()
	admin := e.stack.SchedulerURLs[1] + "/internal/admin/v1/items/sale/admission"
	put := func(body, tok string) int {
		req, err := http.NewRequest(http.MethodPut, admin, jsonBody(body))
		require.NoError(t, err)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := e.http.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	// control registers someone on ctl and waits until a tick admitted them.
	control := func(user string) {
		c, _ := e.register("ctl", user)
		e.waitStatus("ctl", c.Token, "ADMITTED")
	}
	assert.Equal(t, http.StatusUnauthorized, put(`{"ratePerSecond":5}`, ""))
	assert.Equal(t, http.StatusUnauthorized, put(`{"ratePerSecond":5}`, "wrong"))
	assert.Equal(t, http.StatusBadRequest, put(`{"ratePerSecond":-5}`, adminToken))

	var toks []string
	for _, u := range []string{"u1", "u2", "u3"} {
		r, _ := e.register("sale", u)
		toks = append(toks, r.Token)
	}
	st := e.waitStatus("sale", toks[2], "WAITING")
	assert.Nil(t, st.EtaSeconds, "paused: no ETA")
	control("c1")
	assert.Equal(t, "WAITING", e.status("sale", toks[0]).Status, "rate 0 admits nobody")

	require.Equal(t, http.StatusOK, put(`{"ratePerSecond":1}`, adminToken))
	e.waitStatus("sale", toks[0], "ADMITTED")
	st = e.status("sale", toks[2])
	require.Equal(t, "WAITING", st.Status)
	require.NotNil(t, st.EtaSeconds, "admitting: an ETA")
	assert.Positive(t, *st.EtaSeconds)

	// At 50/s (a full budget of 50 after the line empties) the next tick
	// admits anyone who comes, unless paused. A pause keeps the rate.
	require.Equal(t, http.StatusOK, put(`{"ratePerSecond":50}`, adminToken))
	e.waitStatus("sale", toks[2], "ADMITTED")
	require.Equal(t, http.StatusOK, put(`{"paused":true}`, adminToken))
	var late []string
	for _, u := range []string{"u4", "u5"} {
		r, _ := e.register("sale", u)
		late = append(late, r.Token)
	}
	st = e.waitStatus("sale", late[1], "WAITING")
	assert.Nil(t, st.EtaSeconds, "paused, although people were admitted in the last minute: no ETA")
	control("c2")
	for _, tok := range late {
		assert.Equal(t, "WAITING", e.status("sale", tok).Status, "paused again: nobody more admitted")
	}

	// {"paused":false} alone resumes at the rate kept.
	require.Equal(t, http.StatusOK, put(`{"paused":false}`, adminToken))
	for _, tok := range late {
		e.waitStatus("sale", tok, "ADMITTED")
	}
}
