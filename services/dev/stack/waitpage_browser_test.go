package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/topics"
)

// axeSource is axe-core (npm, pinned in testdata/axe, installed by `make
// deps`). Without it the test skips, unless WR_REQUIRE_BROWSER is set.
func axeSource(t *testing.T) string {
	t.Helper()
	src := axeSourceIfInstalled()
	if src == "" {
		if os.Getenv("WR_REQUIRE_BROWSER") != "" {
			t.Fatal("axe-core not installed (make deps runs scripts/npm-deps.sh)")
		}
		t.Skip("axe-core not installed: run scripts/npm-deps.sh (make deps does)")
	}
	return src
}

// axeSourceIfInstalled is axe-core, "" when it is not installed (for a
// test whose main subject is not accessibility).
func axeSourceIfInstalled() string {
	b, err := os.ReadFile(filepath.Join("testdata", "axe", "node_modules", "axe-core", "axe.min.js"))
	if err != nil {
		return ""
	}
	return string(b)
}

type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// axeCheck runs axe-core on the open page (WCAG 2.x A and AA rules and
// axe's best practices) and fails the test on a serious or critical
// violation; lesser ones are logged.
func axeCheck(t *testing.T, ctx context.Context, src, state string) {
	t.Helper()
	vs := axeRun(t, ctx, src)
	for _, v := range vs {
		if v.Impact == "serious" || v.Impact == "critical" {
			t.Errorf("%s: axe %s violation %s (%s) at %v", state, v.Impact, v.ID, v.Help, v.Nodes)
		} else {
			t.Logf("%s: axe %s: %s (%s) at %v", state, v.Impact, v.ID, v.Help, v.Nodes)
		}
	}
	t.Logf("%s: %d violations", state, len(vs))
}

// lostContext is Chromium's answer to an evaluation in a document the page
// replaced between chromedp's look-up of its execution context and the call
// (CDP error -32000): the page is there, the evaluation must be sent again.
const lostContext = "Cannot find context with specified id"

// evalRetry runs an evaluation again, up to five times 200 ms apart, when it
// lost its page's execution context; any other outcome is returned at once.
func evalRetry[T any](run func() (T, error)) (T, error) {
	for i := 0; ; i++ {
		v, err := run()
		if err == nil || i == 4 || !strings.Contains(err.Error(), lostContext) {
			return v, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runRetry is chromedp.Run sent again while it lost its page's execution
// context (evalRetry): after a navigation or a reload the page's first
// evaluations can race the new document's context.
func runRetry[T any](ctx context.Context, a chromedp.Action[T]) (T, error) {
	return evalRetry(func() (T, error) { return chromedp.Run(ctx, a) })
}

// axeRun injects axe-core into the open page (once) and returns its violations.
func axeRun(t *testing.T, ctx context.Context, src string) []axeViolation {
	t.Helper()
	// Injected and run as one: a document replaced between the two has no axe.
	out, err := evalRetry(func() (string, error) {
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`if (!window.axe) {`+src+"\n}; true")); err != nil {
			return "", fmt.Errorf("inject axe-core: %w", err)
		}
		return chromedp.Run(ctx, chromedp.Evaluate[string](`axe.run(document, {resultTypes: ["violations"]}).then((r) =>
		JSON.stringify(r.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
			nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" "))}))))`, chromedp.EvalAwaitPromise))
	})
	require.NoError(t, err, "axe.run")
	var vs []axeViolation
	require.NoError(t, json.Unmarshal([]byte(out), &vs))
	ran, err := evalRetry(func() (int, error) {
		return chromedp.Run(ctx, chromedp.Evaluate[int](`if (!window.axe) {`+src+"\n}; axe.getRules().length"))
	})
	require.NoError(t, err)
	require.Greater(t, ran, 50, "axe-core loaded its rules")
	return vs
}

func waitFor(t *testing.T, ctx context.Context, cond string, d time.Duration, msg string) {
	t.Helper()
	_, err := evalRetry(func() (bool, error) {
		return chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(d)))
	})
	require.NoError(t, err, msg)
}

func statusIs(s string) string {
	return `document.getElementById("status") && document.getElementById("status").dataset.status === "` + s + `"`
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := evalRetry(func() (string, error) {
		return chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(sel)+`).textContent`))
	})
	require.NoError(t, err, sel)
	return s
}

// The default page in every state a fan sees, checked by axe-core in
// Chromium: waiting, pre-queue (the countdown), admitted, sold out and
// rejected, in English and Korean. While the line moves, the polite live
// region announces the position at meaningful steps, not on every update.
func TestWaitingPagePassesAxeInEveryStateInBrowser(t *testing.T) {
	ctx := browser(t)
	axe := axeSource(t)
	wait := item("wait")
	wait.Name = "Spring tour"
	flow := policy("flow", 3, 1000, 60)
	flow.Name = "Flow"
	gone := item("gone")
	gone.Stock = 0
	shut := item("shut")
	shut.Mode, shut.RejectMessage = topics.ModeReject, "Sold through our partners only"
	e := newEnv(t, wait, flow, gone, shut, item("pre"))
	e.start()
	for i := 0; i < 3; i++ {
		e.register("wait", fmt.Sprintf("ahead-%d", i))
	}
	e.waitLine("wait", 3)
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()

	// Waiting.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/wait/wait")))
	waitFor(t, ctx, statusIs("WAITING"), 20*time.Second, "waiting")
	assert.Equal(t, "4", text(t, ctx, "#position"))
	announced := text(t, ctx, "#announce")
	assert.Equal(t, "You are number 4 in line.", announced, "the first position is announced")
	live, err := runRetry(ctx, chromedp.Evaluate[string](`document.getElementById("announce").getAttribute("aria-live")`))
	require.NoError(t, err)
	assert.Equal(t, "polite", live)
	axeCheck(t, ctx, axe, "waiting")

	// Pre-queue: the countdown to a scheduled sale's draw.
	adminPost(t, e, "pre", fmt.Sprintf(`{"opensAt":%d}`, time.Now().Add(10*time.Minute).UnixMilli()))
	e.firstPreQueued("pre", "early")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/pre/wait")))
	waitFor(t, ctx, statusIs("PRE_QUEUE")+` && document.getElementById("countdown").dataset.remaining > 0`, 20*time.Second, "pre-queue")
	assert.Regexp(t, `^\d+:\d\d(:\d\d)?$`, text(t, ctx, "#countdown"))
	axeCheck(t, ctx, axe, "pre-queue")

	// Sold out (a visitor after the last one) and rejected (the operator's message).
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/gone/wait")))
	waitFor(t, ctx, statusIs("SOLD_OUT"), 20*time.Second, "sold out")
	assert.Equal(t, "Sold out: gone", text(t, ctx, "#heading"))
	axeCheck(t, ctx, axe, "sold out")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/shut/wait")))
	waitFor(t, ctx, statusIs("REJECTED"), 20*time.Second, "rejected")
	assert.Equal(t, "Sold through our partners only", text(t, ctx, "#message"))
	axeCheck(t, ctx, axe, "rejected")

	// Admitted, after a line that moved: the position changed on many
	// updates; the live region spoke a few times and then the admission.
	for i := 0; i < 45; i++ {
		e.register("flow", fmt.Sprintf("flow-%d", i))
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/flow/wait")))
	_, err = runRetry(ctx, chromedp.Evaluate[bool](`window.seen = {position: [], announce: []};
		for (const id of ["position", "announce"]) new MutationObserver(() => {
			const v = document.getElementById(id).textContent, l = window.seen[id];
			if (v && l[l.length - 1] !== v) l.push(v);
		}).observe(document.getElementById(id), {childList: true, characterData: true, subtree: true});
		true`))
	require.NoError(t, err)
	waitFor(t, ctx, statusIs("ADMITTED"), 90*time.Second, "admitted")
	var seen struct{ Position, Announce []string }
	js, err := runRetry(ctx, chromedp.Evaluate[string](`JSON.stringify(window.seen)`))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(js), &seen))
	t.Logf("positions shown %v; announced %q", seen.Position, seen.Announce)
	require.GreaterOrEqual(t, len(seen.Position), 5, "the line moved on the page")
	require.NotEmpty(t, seen.Announce)
	assert.Less(t, len(seen.Announce), len(seen.Position)/2, "announced at meaningful steps, not on every update")
	assert.Equal(t, "Admitted", seen.Announce[len(seen.Announce)-1], "the admission is announced")
	axeCheck(t, ctx, axe, "admitted")

	// And the waiting page in Korean.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/wait/wait?lang=ko")))
	waitFor(t, ctx, statusIs("WAITING")+` && document.documentElement.lang === "ko"`, 20*time.Second, "waiting in Korean")
	assert.Equal(t, "현재 대기 순서는 4번입니다.", text(t, ctx, "#announce"))
	axeCheck(t, ctx, axe, "waiting (ko)")

	// The check can fail: low-contrast text and an image without a text
	// alternative, added to the page, are reported.
	_, err = runRetry(ctx, chromedp.Evaluate[bool](`const p = document.createElement("p");
		p.textContent = "faint"; p.style.color = "#bbb"; p.style.background = "#fff";
		document.querySelector("main").append(p, Object.assign(document.createElement("img"), {src: "/logo.png"})); true`))
	require.NoError(t, err)
	ids := map[string]string{}
	for _, v := range axeRun(t, ctx, axe) {
		ids[v.ID] = v.Impact
	}
	assert.Equal(t, "serious", ids["color-contrast"], "%v", ids)
	assert.Equal(t, "critical", ids["image-alt"], "%v", ids)
}

// A browser that asks for Korean sees the page in Korean: the lang
// attribute, the room's strings, a time formatted the Korean way; ?lang=
// overrides it and the choice is kept for the next visit.
func TestPageFollowsAcceptLanguageInBrowser(t *testing.T) {
	ctx := browserWith(t, chromedp.Flag("lang", "ko-KR"), chromedp.Flag("accept-lang", "ko-KR,ko"))
	konser := item("konser")
	konser.Name = "봄 콘서트"
	e := newEnv(t, konser, policy("fast", 50, 1000, 600))
	e.start()
	e.register("konser", "ahead")
	e.waitLine("konser", 1)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/konser/wait")))
	waitFor(t, ctx, statusIs("WAITING"), 20*time.Second, "waiting")
	lang, err := runRetry(ctx, chromedp.Evaluate[string](`document.documentElement.lang`))
	require.NoError(t, err)
	assert.Equal(t, "ko", lang)
	assert.Equal(t, "대기 중인 항목: 봄 콘서트", text(t, ctx, "#heading"))
	assert.Equal(t, "대기 중", text(t, ctx, "#status"))
	assert.Equal(t, "/ 전체 2", text(t, ctx, "#total"))
	title, err := runRetry(ctx, chromedp.Title())
	require.NoError(t, err)
	assert.Equal(t, "대기실: 봄 콘서트", title)

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/fast/wait")))
	waitFor(t, ctx, statusIs("ADMITTED"), 30*time.Second, "admitted")
	valid := text(t, ctx, "#valid-until")
	assert.Regexp(t, regexp.MustCompile(`^입장권은 (오전|오후) \d{1,2}:\d\d:\d\d까지 유효합니다\.$`), valid, "a Korean time")
	assert.Equal(t, "입장 차례입니다: fast", text(t, ctx, "#heading"))

	// The page "continue" leads to by default is in Korean too, its time the
	// Korean way; it passes axe.
	admission := text(t, ctx, "#admission-token")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/fast/admitted?admission="+url.QueryEscape(admission))))
	waitFor(t, ctx, `document.getElementById("verdict").dataset.valid === "true"`, 10*time.Second, "the admission verifies")
	assert.Equal(t, "입장했습니다: fast", text(t, ctx, "#heading"))
	assert.Regexp(t, regexp.MustCompile(`^입장권은 (오전|오후) \d{1,2}:\d\d:\d\d까지 유효합니다\.$`), text(t, ctx, "#verdict"))
	title, err = runRetry(ctx, chromedp.Title())
	require.NoError(t, err)
	assert.Equal(t, "입장 완료", title)
	if axe := axeSourceIfInstalled(); axe != "" {
		axeCheck(t, ctx, axe, "admitted page (ko)")
	}

	// ?lang= wins over the browser's language, and is kept (a cookie).
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/konser/wait?lang=ja")))
	waitFor(t, ctx, statusIs("WAITING"), 20*time.Second, "waiting")
	assert.Equal(t, "待機中", text(t, ctx, "#status"))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/konser/wait")))
	waitFor(t, ctx, statusIs("WAITING"), 20*time.Second, "waiting")
	assert.Equal(t, "待機中", text(t, ctx, "#status"), "the choice is kept")
	current, err := runRetry(ctx, chromedp.Evaluate[string](`document.querySelector('a[aria-current]').dataset.lang`))
	require.NoError(t, err)
	assert.Equal(t, "ja", current, "the language links mark the page's language")
}

// A seller's template for one item, in a real browser: its placeholders are
// filled and kept live (the position, the status), a forged item name with
// markup stays text (no script of it runs), only the room's scripts are on
// the page, and with the browser asking for reduced motion the seller's
// animation stops.
func TestSellerTemplateRendersInBrowser(t *testing.T) {
	ctx := browser(t)
	tour := item("tour")
	tour.Name = `Tour</h1><script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">`
	tour.Template = `<!doctype html>
<html lang="{{.Lang}}"><head><meta charset="utf-8"><title>{{.ItemName}}</title>
<style>
  @keyframes wr-pulse { from { opacity: 1 } to { opacity: .6 } }
  .pulse { animation: wr-pulse 1s infinite alternate; color: var(--wr-text); }
</style></head>
<body><main>
  <h1 id="own-title">{{.ItemName}}</h1>
  <p class="pulse" id="own-line">You are number {{.Position}} {{.Total}}; {{.Status}}; about {{.ETA}}.</p>
  {{.Notice}}{{.Message}}{{.Admission}}
</main>{{.Room}}</body></html>`
	e := newEnv(t, tour)
	e.start()
	for i := 0; i < 5; i++ {
		e.register("tour", fmt.Sprintf("ahead-%d", i))
	}
	e.waitLine("tour", 5)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/tour/wait")))
	waitFor(t, ctx, statusIs("WAITING"), 20*time.Second, "the template's status slot goes live")
	assert.Equal(t, "6", text(t, ctx, "#position"))
	line := text(t, ctx, "#own-line")
	assert.Equal(t, "You are number 6 of 6; Waiting; about –.", strings.Join(strings.Fields(line), " "))
	assert.Equal(t, tour.Name, text(t, ctx, "#own-title"), "the forged name is shown as text")
	pwned, err := runRetry(ctx, chromedp.Evaluate[bool](`window.pwned !== undefined`))
	require.NoError(t, err)
	assert.False(t, pwned, "no script of the forged name ran")
	counts, err := runRetry(ctx, chromedp.Evaluate[string](`[document.scripts.length, document.querySelectorAll("#own-title *").length].join(",")`))
	require.NoError(t, err)
	assert.Equal(t, "3,0", counts, "the room's three scripts only; no element from the name")
	title, err := runRetry(ctx, chromedp.Title())
	require.NoError(t, err)
	assert.Equal(t, tour.Name, title)

	anim := func() string {
		s, err := runRetry(ctx, chromedp.Evaluate[string](`getComputedStyle(document.getElementById("own-line")).animationName`))
		require.NoError(t, err)
		return s
	}
	require.Equal(t, "wr-pulse", anim(), "the seller's animation runs")
	require.NoError(t, chromedp.Do(ctx, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-reduced-motion", Value: "reduce"}}})
		return chromedp.Void{}, err
	}))
	assert.Equal(t, "none", anim(), "and stops for a reader who asks for reduced motion")
}

// A seller's templates as they are uploaded (testdata/seller: a page for
// every language and a Korean one, through the admin API) pass axe-core in
// Chromium with no serious or critical violation, waiting and admitted, in
// English and in Korean. A page that passes the upload's checks can still
// fail axe (low contrast is a browser's finding): the same check reports it.
func TestSellerTemplatesPassAxeInBrowser(t *testing.T) {
	ctx := browser(t)
	axe := axeSource(t)
	page, err := os.ReadFile(filepath.Join("testdata", "seller", "page.html"))
	require.NoError(t, err)
	ko, err := os.ReadFile(filepath.Join("testdata", "seller", "page.ko.html"))
	require.NoError(t, err)
	tour := item("tour")
	tour.Name = "Spring tour"
	faint := item("faint")
	e := newEnv(t, tour, faint, policy("fast", 50, 1000, 600))
	e.start()
	e.register("tour", "ahead")
	e.waitLine("tour", 1)
	body, err := json.Marshal(map[string]any{"template": string(page), "templates": map[string]string{"ko": string(ko)}})
	require.NoError(t, err)
	adminPost(t, e, "tour", string(body))
	adminPost(t, e, "fast", string(body))
	body, err = json.Marshal(map[string]any{"template": strings.Replace(string(page), "color: #1d2433", "color: #c8ccd4", 1)})
	require.NoError(t, err)
	adminPost(t, e, "faint", string(body))
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()

	// The api's item cache follows waitroom.items: wait for the pages.
	shows := func(path, lang, want string) {
		t.Helper()
		require.Eventually(t, func() bool {
			req, err := http.NewRequest(http.MethodGet, e.stack.URL+path, nil)
			require.NoError(t, err)
			req.Header.Set("Accept-Language", lang)
			resp, err := e.http.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return strings.Contains(string(b), want)
		}, 20*time.Second, 100*time.Millisecond, "%s in %s shows %q", path, lang, want)
	}
	shows("/items/tour/wait", "en", "Example Tickets")
	shows("/items/tour/wait", "ko", "예시 티켓")
	shows("/items/fast/wait", "ko", "예시 티켓")
	shows("/items/faint/wait", "en", "#c8ccd4")

	for _, c := range []struct{ path, state, lang, brand string }{
		{"/items/tour/wait?lang=en", "WAITING", "en", "Example Tickets"},
		{"/items/tour/wait?lang=ko", "WAITING", "ko", "예시 티켓"},
		{"/items/tour/wait?lang=ja", "WAITING", "ja", "Example Tickets"}, // no Japanese page: the item's page
		{"/items/fast/wait?lang=ko", "ADMITTED", "ko", "예시 티켓"},
	} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+c.path)))
		waitFor(t, ctx, statusIs(c.state)+` && document.documentElement.lang === "`+c.lang+`"`, 30*time.Second, c.path)
		assert.Equal(t, c.brand, text(t, ctx, "header .brand"), "the seller's page, %s", c.path)
		axeCheck(t, ctx, axe, c.path+" "+c.state)
	}

	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/faint/wait")))
	waitFor(t, ctx, statusIs("WAITING"), 30*time.Second, "faint")
	ids := map[string]string{}
	for _, v := range axeRun(t, ctx, axe) {
		ids[v.ID] = v.Impact
	}
	assert.Equal(t, "serious", ids["color-contrast"], "a faint seller page is reported: %v", ids)
}
