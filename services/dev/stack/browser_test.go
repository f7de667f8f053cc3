package stack_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/services/api/httpapi"
)

// browser starts a headless Chromium (Debian's package) for the test. Without
// one it skips, unless WR_REQUIRE_BROWSER is set (CI sets it after installing
// chromium), so a missing browser can never pass CI silently.
func browser(t *testing.T) context.Context {
	t.Helper()
	return browserWith(t)
}

// browserWith is browser with more of Chromium's options (a language).
func browserWith(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("WR_REQUIRE_BROWSER") != "" {
			t.Fatalf("chromium not installed (apt-get install chromium): %v", err)
		}
		t.Skip("chromium not installed: apt-get install chromium (CI installs it and requires this test)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(900, 900),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
	}
	opts = append(opts, extra...)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	return ctx
}

// The waiting-room page in a real browser: it registers, shows the position
// falling as the scheduler admits the people ahead, then the admission with a
// token that verifies. A screenshot is saved as the test's artefact.
func TestWaitingRoomPageInBrowser(t *testing.T) {
	ctx := browser(t)
	show := policy("show", 0, 0, 60) // paused until the browser is in line
	show.Name = "Front-row show"
	e := newEnv(t, show)
	e.start()
	for i := 0; i < 12; i++ {
		e.register("show", fmt.Sprintf("ahead-%d", i))
	}
	e.waitLine("show", 12)

	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(e.stack.URL+"/items/show/wait?userId=browser-user"), // through the front door
		chromedp.WaitVisible("#position"),
	))
	_, err := runRetry(ctx, chromedp.Poll[bool](`document.getElementById("status").dataset.status === "WAITING"`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err)
	pos, err := runRetry(ctx, chromedp.Text("#position"))
	require.NoError(t, err)
	first, err := strconv.Atoi(pos)
	require.NoError(t, err, "position %q", pos)
	assert.Equal(t, 13, first, "12 people ahead")
	head, err := runRetry(ctx, chromedp.Text("#heading"))
	require.NoError(t, err)
	assert.Equal(t, "You are in line for Front-row show", head, "the item's name, not its id")
	eta, err := runRetry(ctx, chromedp.Text("#eta"))
	require.NoError(t, err)
	assert.Equal(t, "–", eta, "paused: no ETA")

	// Admission starts: the page must show the position falling, never rising.
	adminPut(t, e, "show", `{"ratePerSecond":4}`)
	seen := []int{first}
	status := ""
	deadline := time.Now().Add(60 * time.Second)
	reloaded := false
	for status != "ADMITTED" && time.Now().Before(deadline) {
		if !reloaded && seen[len(seen)-1] <= first-3 {
			// Pause, reload: the progress bar must keep where it was.
			adminPut(t, e, "show", `{"ratePerSecond":0}`)
			require.NoError(t, chromedp.Do(ctx, chromedp.Reload()))
			_, err = runRetry(ctx, chromedp.Poll[bool](`document.getElementById("status").dataset.status === "WAITING"`,
				chromedp.WithPollingTimeout(20*time.Second)))
			require.NoError(t, err)
			bar, err := runRetry(ctx, chromedp.Evaluate[float64](`document.getElementById("bar").value`))
			require.NoError(t, err)
			assert.Greater(t, bar, 0.0, "after a reload the progress bar starts where it was, not at 0")
			reloaded = true
			adminPut(t, e, "show", `{"ratePerSecond":4}`)
		}
		status, err = runRetry(ctx, chromedp.Evaluate[string](`document.getElementById("status").dataset.status`))
		require.NoError(t, err)
		pos, err = runRetry(ctx, chromedp.Text("#position"))
		require.NoError(t, err)
		if n, err := strconv.Atoi(pos); err == nil && n != seen[len(seen)-1] {
			seen = append(seen, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, "ADMITTED", status, "positions seen %v", seen)
	require.True(t, reloaded, "the page was reloaded while waiting")
	transport, err := runRetry(ctx, chromedp.Evaluate[string](`document.body.dataset.transport || ""`))
	require.NoError(t, err)
	assert.Equal(t, "sse", transport, "the page listened on Server-Sent Events through the front door")
	for i := 1; i < len(seen); i++ {
		assert.Less(t, seen[i], seen[i-1], "the position only falls: %v", seen)
	}
	assert.GreaterOrEqual(t, len(seen), 3, "the page showed the position falling: %v", seen)

	_, err = runRetry(ctx, chromedp.Poll[bool](`getComputedStyle(document.getElementById("admitted")).display === "block"`,
		chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the admission panel is shown")
	admission, err := runRetry(ctx, chromedp.Text("#admission-token"))
	require.NoError(t, err)
	href, err := runRetry(ctx, chromedp.AttributeValue("#continue", "href"))
	require.NoError(t, err)
	shot, err := runRetry(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	a := e.admissionCall("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: admission, ItemID: "show"})
	assert.Equal(t, http.StatusOK, a.Code, "the page's admission token verifies: %s", a.Body)
	assert.Contains(t, href.Value, "admission=")
	head, err = runRetry(ctx, chromedp.Text("#heading"))
	require.NoError(t, err)
	assert.Equal(t, "It's your turn: Front-row show", head, "the heading says the person is in")

	// On the dev stack "continue" leads to the demo shop (TestShopJourneyInBrowser);
	// elsewhere, by default, to the api's admitted page, which verifies the token.
	require.True(t, strings.HasPrefix(href.Value, "/shop/show?admission="), href.Value)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/show/admitted?admission="+url.QueryEscape(admission))))
	_, err = runRetry(ctx, chromedp.Poll[bool](`document.getElementById("verdict") && document.getElementById("verdict").dataset.valid === "true"`,
		chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "the admitted page verifies the admission")
	head, err = runRetry(ctx, chromedp.Text("#heading"))
	require.NoError(t, err)
	assert.Equal(t, "You're in: Front-row show", head)

	t.Logf("screenshot: %s (positions seen %v)", saveArtefact(t, "waiting-room-admitted.png", shot), seen)
}

// saveArtefact writes a test's artefact (a screenshot) to $WR_ARTEFACTS_DIR
// (default /tmp/waitroom-artefacts) and returns its path.
func saveArtefact(t *testing.T, name string, b []byte) string {
	t.Helper()
	dir := os.Getenv("WR_ARTEFACTS_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "waitroom-artefacts")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	out := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(out, b, 0o644))
	return out
}

func adminPut(t *testing.T, e *env, item, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, e.stack.SchedulerURLs[0]+"/internal/admin/v1/items/"+item+"/admission", jsonBody(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := e.http.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}
