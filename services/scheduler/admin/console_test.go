package admin_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/services/scheduler/admin"
)

// The console's login: a wrong token is refused, the right one gives an
// HttpOnly, SameSite=Strict session cookie that is not the token; the admin
// API accepts that cookie only with the console's header (a form or script
// of another site cannot send it), and the event stream only with it.
func TestConsoleLogin(t *testing.T) {
	e := newEnv(t, fakes{})
	c := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(tok string) *http.Response {
		resp, err := c.PostForm(e.url+admin.ConsolePath+"/login", url.Values{"token": {tok}})
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	page := func(cookie *http.Cookie) string {
		req, _ := http.NewRequest(http.MethodGet, e.url+admin.ConsolePath, nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	assert.Contains(t, page(nil), `id="login"`, "no session: the login form")

	resp := login("wrong")
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/admin?error=wrong+token", resp.Header.Get("Location"))
	assert.Empty(t, resp.Cookies())

	resp = login(token)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	ck := resp.Cookies()[0]
	assert.True(t, ck.HttpOnly)
	assert.True(t, ck.Secure, "Secure by default")
	assert.Equal(t, int(admin.DefaultSessionTTL.Seconds()), ck.MaxAge)
	assert.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	assert.NotContains(t, ck.Value, token)
	assert.Contains(t, page(ck), `new EventSource("/admin/events")`, "signed in: the console")
	assert.Contains(t, page(&http.Cookie{Name: ck.Name, Value: ck.Value + "0"}), `id="login"`, "a forged cookie")

	call := func(path string, cookie *http.Cookie, header bool) int {
		req, _ := http.NewRequest(http.MethodGet, e.url+path, nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		if header {
			req.Header.Set("X-WR-Console", "1")
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusUnauthorized, call(admin.Prefix+"/stats", ck, false), "the cookie alone (CSRF)")
	assert.Equal(t, http.StatusOK, call(admin.Prefix+"/stats", ck, true), "the console's call")
	assert.Equal(t, http.StatusUnauthorized, call(admin.Prefix+"/stats", nil, true), "the header alone")
	assert.Equal(t, http.StatusUnauthorized, call(admin.ConsolePath+"/events", nil, false))

	// The stream sends snapshots of every item.
	req, _ := http.NewRequest(http.MethodGet, e.url+admin.ConsolePath+"/events", nil)
	req.AddCookie(ck)
	sresp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer sresp.Body.Close()
	require.Equal(t, http.StatusOK, sresp.StatusCode)
	buf := make([]byte, 4096)
	n, _ := sresp.Body.Read(buf)
	assert.True(t, strings.HasPrefix(string(buf[:n]), "event: snapshot\ndata: {"), "%q", buf[:n])

	resp, err = c.PostForm(e.url+admin.ConsolePath+"/logout", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Len(t, resp.Cookies(), 1)
	assert.Negative(t, resp.Cookies()[0].MaxAge, "sign out removes the cookie")
}
