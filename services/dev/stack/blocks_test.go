package stack_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/scheduler/admin"
)

// The whole stack: a user and a /24 blocked over one scheduler's admin API
// are refused 403 BLOCKED by the api (client address from X-Forwarded-For,
// sent by the loopback, a trusted proxy by default) while others register;
// the list reads the same from another replica; lifting lets them in.
func TestBlocksOverTheAdminAPI(t *testing.T) {
	e := newEnv(t, policy("gig", 0, 10, 60))
	e.start()
	adminDo := func(replica int, method, path, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, e.stack.SchedulerURLs[replica]+admin.Prefix+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := e.http.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var b json.RawMessage
		_ = json.NewDecoder(resp.Body).Decode(&b)
		return resp.StatusCode, b
	}
	from := func(ip, user string) answer {
		return e.do(http.MethodPost, "/api/v1/items/gig/registrations", []byte(`{"userId":"`+user+`"}`), "X-Forwarded-For", ip)
	}
	code, b := adminDo(0, http.MethodPost, "/blocks", `{"subject":"user:mallory","reason":"ticket bot"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)
	code, b = adminDo(0, http.MethodPost, "/blocks", `{"subject":"ip:203.0.113.0/24","reason":"scalper farm"}`)
	require.Equal(t, http.StatusOK, code, "%s", b)

	// Two records: the api applies each as its fetch brings it, so the
	// first can be in force before the second arrives. Wait for both.
	require.Eventually(t, func() bool { return from("198.51.100.1", "mallory").Code == http.StatusForbidden }, 15*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return from("203.0.113.200", "bob").Code == http.StatusForbidden }, 15*time.Second, 50*time.Millisecond)
	for _, c := range []struct{ ip, user, reason string }{{"198.51.100.1", "mallory", "ticket bot"}, {"203.0.113.200", "bob", "scalper farm"}} {
		a := from(c.ip, c.user)
		require.Equal(t, http.StatusForbidden, a.Code, "%s", a.Body)
		var body httpserver.ErrorBody
		a.decode(t, &body)
		assert.Equal(t, "BLOCKED", body.Error.Code)
		assert.Contains(t, body.Error.Message, c.reason)
	}
	assert.Equal(t, http.StatusAccepted, from("203.0.114.1", "carol").Code, "another /24")
	assert.Equal(t, http.StatusAccepted, from("198.51.100.1", "dave").Code, "another user")

	var list admin.BlocksResponse
	require.Eventually(t, func() bool {
		code, b := adminDo(2, http.MethodGet, "/blocks", "")
		return code == http.StatusOK && json.Unmarshal(b, &list) == nil && len(list.Blocks) == 2
	}, 15*time.Second, 50*time.Millisecond, "every replica lists the blocks")

	code, b = adminDo(1, http.MethodDelete, "/blocks?subject=user:mallory", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	code, b = adminDo(1, http.MethodDelete, "/blocks?subject=ip:203.0.113.0/24", "")
	require.Equal(t, http.StatusOK, code, "%s", b)
	// The two lifts are two records too: wait for each.
	require.Eventually(t, func() bool { return from("198.51.100.1", "mallory").Code == http.StatusAccepted }, 15*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return from("203.0.113.200", "bob").Code == http.StatusAccepted }, 15*time.Second, 50*time.Millisecond)
}
