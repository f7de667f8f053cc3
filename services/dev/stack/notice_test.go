package stack_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// setNotice sets item's notice through a scheduler's admin API.
func (e *env) setNotice(item, notice string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.stack.SchedulerURLs[1]+"/internal/admin/v1/items/"+item,
		strings.NewReader(`{"notice":`+string(must(json.Marshal(notice)))+`}`))
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	require.Equal(e.t, http.StatusOK, resp.StatusCode, "%s", body)
}

// An operator's message to everyone waiting: it reaches an open page over
// the event stream within 3 s, a poller with its next status, and it is kept
// in the view; clearing it clears the page.
func TestAnOperatorNoticeReachesEveryoneWaitingInBrowser(t *testing.T) {
	ctx, cancel := context.WithTimeout(browser(t), 90*time.Second)
	defer cancel()
	e := newEnv(t, policy("gig", 0, 10, 60))
	e.start()
	poller, _ := e.register("gig", "poller")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/gig/wait")))
	_, err := runRetry(ctx, chromedp.Poll[bool](`document.getElementById("status").dataset.status === "WAITING" && document.body.dataset.transport === "sse"`,
		chromedp.WithPollingTimeout(30*time.Second)))
	require.NoError(t, err, "the page waits on a stream")
	shown, err := runRetry(ctx, chromedp.Text("#notice", chromedp.NodeReady))
	require.NoError(t, err)
	require.Empty(t, shown, "no notice yet")
	assert.Empty(t, e.waitStatus("gig", poller.Token, "WAITING").Notice)

	const msg = "The show starts 20 minutes late. <b>Your place is kept.</b>"
	e.setNotice("gig", msg)
	start := time.Now()
	_, err = runRetry(ctx, chromedp.Poll[bool](`document.getElementById("notice").textContent !== ""`,
		chromedp.WithPollingTimeout(3*time.Second)))
	require.NoError(t, err, "the notice is on the open page within 3 s")
	t.Logf("notice shown after %s", time.Since(start).Round(time.Millisecond))
	shown, err = runRetry(ctx, chromedp.Text("#notice"))
	require.NoError(t, err)
	assert.Equal(t, msg, shown, "shown as text, never as markup")
	bold, err := runRetry(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#notice b").length`))
	require.NoError(t, err)
	assert.Zero(t, bold)
	require.Eventually(t, func() bool { return e.status("gig", poller.Token).Notice == msg }, 10*time.Second, 50*time.Millisecond,
		"a poller reads it with its status")
	it, ok, err := queue.New(e.rdb).Item(context.Background(), "gig")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, msg, it.Notice, "kept in the view")

	e.setNotice("gig", "")
	_, err = runRetry(ctx, chromedp.Poll[bool](`document.getElementById("notice").textContent === ""`,
		chromedp.WithPollingTimeout(5*time.Second)))
	require.NoError(t, err, "a cleared notice leaves the page")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
