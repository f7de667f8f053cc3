package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/services/scheduler/admin"
)

// The operator's console in Chromium: a wrong token is refused, the right
// one signs in (an HttpOnly cookie; the API still wants it with the
// console's header); the numbers move live during a short spike, and a rate
// set in the console is what the outflow then follows.
func TestConsoleInBrowser(t *testing.T) {
	ctx := browser(t)
	drop := policy("drop", 2, 500, 120)
	drop.Name = "Console drop"
	e := newEnv(t, drop)
	e.start()
	ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	url := e.stack.SchedulerURLs[1] + admin.ConsolePath // any replica serves it
	eval := func(js string) string {
		t.Helper()
		var s string
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var err error
			if s, err = chromedp.Run(ctx, chromedp.Evaluate[string](js)); err == nil || time.Now().After(end) {
				require.NoError(t, err, js)
				return s
			}
		}
	}
	waitFor := func(js, what string, within time.Duration) {
		t.Helper()
		for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
				return
			}
		}
		require.Fail(t, "never "+what, js)
	}
	cellOf := func(cls string) float64 {
		t.Helper()
		s := eval(`(document.querySelector('tr[data-item="drop"] .` + cls + `') || {}).textContent || "0"`)
		f, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err, "%s %q", cls, s)
		return f
	}

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url)))
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys("#token", "wrong-token")))
	_ = eval(`(() => { document.getElementById("login").submit(); return ""; })()`)
	waitFor(`!!document.getElementById("login-error")`, "a wrong token refused", 10*time.Second)
	require.NoError(t, chromedp.Do(ctx, chromedp.SendKeys("#token", adminToken)))
	_ = eval(`(() => { document.getElementById("login").submit(); return ""; })()`)
	waitFor(`document.body.dataset.live === "true" && !!document.querySelector('tr[data-item="drop"]')`, "signed in, live", 15*time.Second)
	assert.Equal(t, "", eval(`document.cookie`), "the session cookie is HttpOnly")

	// The console's cookie alone does not open the admin API to other callers.
	resp, err := http.Get(e.stack.SchedulerURLs[1] + admin.Prefix + "/items")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// A spike: the waiting count and the inflow move.
	for i := range 150 {
		e.register("drop", fmt.Sprintf("spike-%d", i))
	}
	waitFor(`Number(document.querySelector('tr[data-item="drop"] .waiting').textContent) > 50`, "the line grew on the console", 20*time.Second)
	slow := 0.0
	for range 8 { // a few seconds at rate 2
		slow = max(slow, cellOf("outflow"))
		time.Sleep(500 * time.Millisecond)
	}
	assert.LessOrEqual(t, slow, 4.0, "outflow at rate 2")
	assert.Greater(t, slow, 0.0, "people get in at rate 2")

	// The operator sets rate 20 in the console: the policy changes and the
	// outflow follows.
	_ = eval(`(() => { const r = document.querySelector('tr[data-item="drop"]'); const i = r.querySelector(".rate-input");
		i.value = "20"; r.querySelector(".set-rate").click(); return ""; })()`)
	fast := 0.0
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end) && fast < 10; time.Sleep(250 * time.Millisecond) {
		fast = max(fast, cellOf("outflow"))
	}
	assert.GreaterOrEqual(t, fast, 10.0, "the outflow follows the new rate")
	var v admin.ItemView
	req, err := http.NewRequest(http.MethodGet, e.stack.SchedulerURLs[0]+admin.Prefix+"/items/drop", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err = e.http.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	assert.Equal(t, 20.0, v.Policy.RatePerSecond, "the console's change is the item's policy")
	assert.Equal(t, "20", eval(`document.querySelector('tr[data-item="drop"] .rate').textContent`))

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	t.Logf("screenshot: %s (outflow %.1f/s at rate 2, %.1f/s at rate 20)", saveArtefact(t, "console.png", shot), slow, fast)
}
