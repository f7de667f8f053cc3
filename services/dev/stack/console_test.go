package stack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/scheduler/admin"
	"github.com/waitroom/waitroom/topics"
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
			if s, err = runRetry(ctx, chromedp.Evaluate[string](js)); err == nil || time.Now().After(end) {
				require.NoError(t, err, js)
				return s
			}
		}
	}
	waitFor := func(js, what string, within time.Duration) {
		t.Helper()
		for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			if ok, err := runRetry(ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
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

	// The panels beyond the items, with real values. A record dead-lettered
	// now shows as size 1; the consumer group's lag is a number; every shard
	// names the replica whose lock it is, with its host and address.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	require.NoError(t, e.kcl.ProduceSync(ctx2, &kgo.Record{Topic: topics.DLQ(topics.Registrations), Key: []byte("drop"), Value: []byte("not json"),
		Headers: []kgo.RecordHeader{{Key: topics.HeaderErrorType, Value: []byte(topics.ErrorTypeParsing)}}}).FirstErr())
	waitFor(`(document.querySelector('#dlq tr[data-key="waitroom.registrations.dlq"] .size') || {}).textContent === "1"`, "the DLQ record counted", 15*time.Second)
	assert.Equal(t, "0", eval(`document.querySelector('#dlq tr[data-key="waitroom.items.dlq"] .size').textContent`))
	waitFor(`/^\d+$/.test((document.querySelector('#lag tr[data-key="waitroom-consumer"] .lag') || {}).textContent || "")`, "the consumer lag as a number", 15*time.Second)
	waitFor(`document.querySelectorAll("#shards tbody tr").length === 8 && [...document.querySelectorAll("#shards .replica")].every((c) => c.textContent !== "nobody")`,
		"every shard led", 15*time.Second)
	replicas, err := strconv.Atoi(eval(`document.getElementById("replicas").textContent`))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, replicas, 2, "3 replicas share 8 shards")
	hosts := eval(`[...document.querySelectorAll("#shards .host")].map((c) => c.textContent).join(" ")`)
	named := 0
	for _, u := range e.stack.SchedulerURLs {
		if strings.Contains(hosts, strings.TrimPrefix(u, "http://")) {
			named++
		}
	}
	assert.Equal(t, replicas, named, "each leading replica named by its admin address: %s", hosts)

	// Per item: the ETA of the last in line while people wait, and the
	// abandoned count the stats hash holds.
	_ = eval(`(() => { const r = document.querySelector('tr[data-item="drop"]'); r.querySelector(".pause").click(); return ""; })()`)
	for i := range 5 {
		e.register("drop", fmt.Sprintf("late-%d", i))
	}
	waitFor(`document.querySelector('tr[data-item="drop"] .eta').textContent === "–"`, "no ETA while paused", 15*time.Second)
	_ = eval(`(() => { const r = document.querySelector('tr[data-item="drop"]'); const i = r.querySelector(".rate-input");
		i.value = "0.5"; r.querySelector(".set-rate").click(); return ""; })()`)
	_ = eval(`(() => { const r = document.querySelector('tr[data-item="drop"]'); r.querySelector(".pause").click(); return ""; })()`)
	waitFor(`/\d+ (s|min)/.test(document.querySelector('tr[data-item="drop"] .eta').textContent)`, "the last in line's ETA", 15*time.Second)
	require.NoError(t, e.rdb.HSet(ctx2, queue.KeysFor("drop").Stats, "abandoned", 4).Err())
	waitFor(`document.querySelector('tr[data-item="drop"] .abandoned').textContent === "4"`, "the abandoned count", 15*time.Second)

	// The queue mode: reject with a message; the api then refuses with it.
	_ = eval(`(() => { const r = document.querySelector('#settings tr[data-item="drop"]');
		r.querySelector(".reject-input").value = "back at noon"; r.querySelector(".set-reject").click(); return ""; })()`)
	waitFor(`document.querySelector('#settings tr[data-item="drop"] .reject-input').dataset.shown === "back at noon"`, "the reject message set", 15*time.Second)
	_ = eval(`(() => { const r = document.querySelector('#settings tr[data-item="drop"]');
		r.querySelector(".mode-input").value = "reject"; r.querySelector(".set-mode").click(); return ""; })()`)
	waitFor(`document.querySelector('#settings tr[data-item="drop"] .mode').textContent === "reject"`, "the mode changed to reject", 15*time.Second)
	var refused answer
	require.Eventually(t, func() bool {
		refused = e.do(http.MethodPost, "/api/v1/items/drop/registrations", []byte(`{"userId":"after-reject"}`))
		return refused.Code == http.StatusConflict
	}, 15*time.Second, 50*time.Millisecond, "the api refuses in reject mode")
	assert.Contains(t, string(refused.Body), "back at noon")
	waitFor(`Number(document.querySelector('tr[data-item="drop"] .refused').textContent) >= 1 && document.querySelector('tr[data-item="drop"] .refused').title.startsWith("REGISTRATION_REJECTED ")`,
		"the refusal counted on the console", 20*time.Second)

	// opensAt: the admin adds the draw commitment (the stack's schedulers
	// hold a draw key) and the api pre-queues registrations until then.
	_ = eval(`(() => { const r = document.querySelector('#settings tr[data-item="drop"]');
		r.querySelector(".opens-input").value = localInput(Date.now() + 3600000); r.querySelector(".set-opens").click(); return ""; })()`)
	waitFor(`/^4\d\d /.test(document.getElementById("msg").textContent) || document.querySelector('#settings tr[data-item="drop"] .opens').textContent !== "open now"`,
		"the opensAt answer shown", 15*time.Second)
	require.Equal(t, "", eval(`document.getElementById("msg").textContent`), "the admin accepted opensAt")

	// The item's own waiting page: a template with a script of its own is
	// refused with the line; a good one is kept and served; "default" drops it.
	upload := func(src string) {
		_ = eval(`(() => { const r = document.querySelector('#settings tr[data-item="drop"]'), dt = new DataTransfer();
			dt.items.add(new File([` + strconv.Quote(src) + `], "page.html", {type: "text/html"}));
			r.querySelector(".tpl-input").files = dt.files; r.querySelector(".set-tpl").click(); return ""; })()`)
	}
	upload("<body><script>steal()</script>{{.Room}}</body>")
	waitFor(`document.getElementById("msg").textContent.startsWith("400 INVALID_TEMPLATE: template: line 1: <script> is not allowed")`,
		"a template with a script refused, its line named", 15*time.Second)
	const own = `<html lang="{{.Lang}}"><title>{{.ItemName}}</title><body><h1 id="own">Drop: {{.ItemName}}</h1>{{.Position}}{{.Room}}</body></html>`
	upload(own)
	waitFor(fmt.Sprintf(`document.querySelector('#settings tr[data-item="drop"] .tpl').textContent === "own template (%d bytes)"`, len(own)),
		"the template kept with the item", 15*time.Second)
	require.Eventually(t, func() bool {
		return strings.Contains(string(e.do(http.MethodGet, "/items/drop/wait", nil).Body), `<h1 id="own">Drop: `)
	}, 15*time.Second, 50*time.Millisecond, "the api serves the item's template")
	// A Korean page beside it: Korean readers get it, and "default" with
	// Korean chosen drops only it.
	const ko = `<html lang="ko"><title>{{.ItemName}}</title><body><h1 id="own">한국어: {{.ItemName}}</h1>{{.Position}}{{.Room}}</body></html>`
	_ = eval(`(() => { document.querySelector('#settings tr[data-item="drop"] .tpl-lang').value = "ko"; return ""; })()`)
	upload(ko)
	waitFor(fmt.Sprintf(`document.querySelector('#settings tr[data-item="drop"] .tpl').textContent === "own template (%d bytes); ko (%d bytes)"`, len(own), len(ko)),
		"the Korean page kept beside the item's", 15*time.Second)
	require.Eventually(t, func() bool {
		return strings.Contains(string(e.do(http.MethodGet, "/items/drop/wait?lang=ko", nil).Body), `<h1 id="own">한국어: `)
	}, 15*time.Second, 50*time.Millisecond, "the api serves the Korean page to a Korean reader")
	_ = eval(`(() => { document.querySelector('#settings tr[data-item="drop"] .clear-tpl').click(); return ""; })()`)
	waitFor(fmt.Sprintf(`document.querySelector('#settings tr[data-item="drop"] .tpl').textContent === "own template (%d bytes)"`, len(own)),
		"the Korean page dropped, the item's kept", 15*time.Second)
	_ = eval(`(() => { document.querySelector('#settings tr[data-item="drop"] .tpl-lang').value = ""; document.querySelector('#settings tr[data-item="drop"] .clear-tpl').click(); return ""; })()`)
	waitFor(`document.querySelector('#settings tr[data-item="drop"] .tpl').textContent === "the install's page"`, "back to the install's page", 15*time.Second)

	// Blocks: added in the console, in force at the api, lifted in the console.
	_ = eval(`(() => { document.getElementById("block-subject").value = "user:mallory"; document.getElementById("block-reason").value = "ticket bot";
		document.getElementById("block-add").click(); return ""; })()`)
	waitFor(`(document.querySelector('#blocks tr[data-key="user:mallory"] .reason') || {}).textContent === "ticket bot"`, "the block listed", 15*time.Second)
	_ = eval(`(() => { const r = document.querySelector('#settings tr[data-item="drop"]');
		r.querySelector(".mode-input").value = "fifo"; r.querySelector(".set-mode").click(); return ""; })()`)
	waitFor(`document.querySelector('#settings tr[data-item="drop"] .mode').textContent === "fifo"`, "the mode back to fifo", 15*time.Second)
	assert.Equal(t, "", eval(`document.getElementById("msg").textContent`), "no error after the mode change")
	// Back to fifo with opensAt an hour away: the api pre-queues.
	var pre answer
	require.Eventually(t, func() bool {
		pre = e.do(http.MethodPost, "/api/v1/items/drop/registrations", []byte(`{"userId":"early-bird"}`))
		return pre.Code == http.StatusAccepted && strings.Contains(string(pre.Body), `"PRE_QUEUE"`)
	}, 15*time.Second, 50*time.Millisecond, "the api pre-queues registrations before opensAt")
	waitFor(`Number(document.querySelector('tr[data-item="drop"] .prequeued').textContent) >= 1`, "the pre-queue's size on the console", 15*time.Second)
	var blocked answer
	require.Eventually(t, func() bool {
		blocked = e.do(http.MethodPost, "/api/v1/items/drop/registrations", []byte(`{"userId":"mallory"}`))
		return blocked.Code == http.StatusForbidden
	}, 15*time.Second, 50*time.Millisecond, "the api refuses the blocked user")
	assert.Contains(t, string(blocked.Body), `"code":"BLOCKED"`)
	assert.Contains(t, string(blocked.Body), "ticket bot")

	shot, err := runRetry(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	t.Logf("screenshot: %s (outflow %.1f/s at rate 2, %.1f/s at rate 20)", saveArtefact(t, "console.png", shot), slow, fast)

	_ = eval(`(() => { document.querySelector('#blocks tr[data-key="user:mallory"] .lift').click(); return ""; })()`)
	waitFor(`!document.querySelector('#blocks tr[data-key="user:mallory"]')`, "the block lifted", 15*time.Second)
	require.Eventually(t, func() bool {
		return e.do(http.MethodPost, "/api/v1/items/drop/registrations", []byte(`{"userId":"mallory"}`)).Code == http.StatusAccepted
	}, 15*time.Second, 50*time.Millisecond, "lifted: mallory registers")
}
