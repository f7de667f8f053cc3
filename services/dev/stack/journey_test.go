package stack_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/services/api/httpapi"
)

// The whole journey in Chromium through the front door: the waiting page,
// the admission, "continue" into the demo shop (waitroomkit's middleware),
// "buy", and the admission completed at the api. Coming back to the shop
// afterwards leads to the waiting page, which says it is done.
func TestShopJourneyInBrowser(t *testing.T) {
	ctx := browser(t)
	gig := policy("gig", 0, 10, 120) // paused until the browser is in line
	gig.Name = "Gig night"
	e := newEnv(t, gig)
	e.start()
	for _, u := range []string{"ahead-1", "ahead-2", "ahead-3"} {
		e.register("gig", u)
	}
	e.waitLine("gig", 3)

	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	// poll evaluates js until it is true; an evaluation that fails because
	// the page is navigating is tried again on the next page.
	poll := func(js, what string) {
		t.Helper()
		var err error
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			var ok bool
			if ok, err = runRetry(ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
				return
			}
		}
		require.Fail(t, "never "+what, "last error: %v", err)
	}
	text := func(sel string) string {
		t.Helper()
		s, err := runRetry(ctx, chromedp.Text(sel))
		require.NoError(t, err, sel)
		return s
	}
	// A click that navigates, as a person's: through the page's own element
	// (chromedp's mouse click waits on the page it leaves).
	click := func(id string) {
		t.Helper()
		_, err := runRetry(ctx, chromedp.Evaluate[bool](`(() => { const b = document.getElementById("`+id+`"); b.click(); return true; })()`))
		require.NoError(t, err, "click #%s", id)
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/gig/wait?userId=buyer")))
	poll(`document.getElementById("status").dataset.status === "WAITING"`, "in line")
	assert.Equal(t, "4", text("#position"), "three people ahead")

	adminPut(t, e, "gig", `{"ratePerSecond":5}`)
	poll(`document.getElementById("status").dataset.status === "ADMITTED"`, "admitted")
	admission := text("#admission-token")
	require.NotEmpty(t, admission)

	// Continue: the shop takes the token from the link, keeps it in a cookie
	// and takes it out of the address bar.
	click("continue")
	poll(`!!document.getElementById("order") && document.getElementById("order").dataset.status === "ADMITTED"`, "the shop's checkout")
	loc, err := runRetry(ctx, chromedp.Location())
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(loc, "/shop/gig"), "the token left the URL: %s", loc)
	assert.Equal(t, "buyer", text("#user"), "the shop knows who was admitted")
	assert.Equal(t, "Checkout: gig", text("#heading"))
	require.NoError(t, chromedp.Do(ctx, chromedp.Reload()))
	poll(`!!document.getElementById("order") && document.getElementById("order").dataset.status === "ADMITTED"`, "a reload keeps the checkout (cookie)")

	// Buy: the order page, and the admission completed at the api.
	click("buy")
	poll(`!!document.getElementById("order") && document.getElementById("order").dataset.status === "COMPLETED"`, "order placed")
	assert.Equal(t, "Order placed: gig", text("#heading"))
	shot, err := runRetry(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	a := e.admissionCall("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: admission, ItemID: "gig"})
	assert.Equal(t, http.StatusGone, a.Code, "the purchase completed the admission: %s", a.Body)
	assert.Equal(t, "ADMISSION_ENDED", errCode(t, a))

	// The shop again: no admission any more, so the waiting page, which
	// resumes the stored registration and says it is done.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/shop/gig")))
	poll(`location.pathname === "/items/gig/wait" && document.getElementById("heading").dataset.status === "COMPLETED"`, "back at the waiting page, completed")
	assert.Equal(t, "Done: Gig night", text("#heading"))

	t.Logf("screenshot: %s", saveArtefact(t, "shop-journey-completed.png", shot))
}
