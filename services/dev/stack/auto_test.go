package stack_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/kit/go/waitroomkit"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// autoShop is a site behind a kit with auto entry: GET /shop/{itemId}
// answers 200 with the admitted user's tokenId.
func autoShop(t *testing.T, apiURL string, opts ...waitroomkit.Option) string {
	t.Helper()
	kit, err := waitroomkit.New(apiURL, append(opts, waitroomkit.WithAutoEntry())...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = kit.Close() })
	require.NoError(t, kit.Refresh(context.Background()))
	mux := http.NewServeMux()
	mux.Handle("GET /shop/{itemId}", kit.Protect(waitroomkit.ItemFromPath("itemId"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := waitroomkit.FromContext(r.Context())
		_, _ = io.WriteString(w, a.TokenID)
	})))
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)
	return site.URL
}

// visitor is one browser: its own cookies, redirects not followed (a 303
// to the waiting page is the page shown).
type visitor struct {
	c    *http.Client
	site string
}

func newVisitor(site string) *visitor {
	jar, _ := cookiejar.New(nil)
	return &visitor{site: site, c: &http.Client{Jar: jar, Timeout: 15 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// visit is what the visitor sees of GET /shop/{item}: the site (200, the
// admitted tokenId), or the waiting page (303) with the place the kit
// handed it (#queue=).
type visit struct {
	code    int
	tokenID string // 200: the admission's tokenId
	page    string // 303: the path it was sent to
	place   string // 303: the queue token in the fragment
}

func (v *visitor) get(t *testing.T, item string) visit {
	t.Helper()
	resp, err := v.c.Get(v.site + "/shop/" + item)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := visit{code: resp.StatusCode}
	switch resp.StatusCode {
	case http.StatusOK:
		out.tokenID = string(b)
	case http.StatusSeeOther:
		u, err := url.Parse(resp.Header.Get("Location"))
		require.NoError(t, err)
		frag, err := url.ParseQuery(u.Fragment)
		require.NoError(t, err)
		out.page, out.place = u.Path, frag.Get(waitroomkit.QueueParam)
	default:
		t.Fatalf("GET /shop/%s: %d %s", item, resp.StatusCode, b)
	}
	return out
}

// registeredInOrder is every tokenId registered for item, in the line's
// order (the broker's offsets on the item's one partition).
func registeredInOrder(t *testing.T, e *env, item string) []string {
	t.Helper()
	var out []string
	rs := records(t, e, topics.Registrations)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Offset < rs[j].Offset })
	for _, r := range rs {
		ev, err := topics.DecodeRegistration(r.Value)
		require.NoError(t, err)
		if ev.ItemID == item && ev.Kind == topics.KindRegister {
			out = append(out, ev.TokenID)
		}
	}
	return out
}

// autoEntries is the api's count of auto registrations with outcome
// (admitted, late or line).
func (e *env) autoEntries(outcome string) int {
	e.t.Helper()
	m := regexp.MustCompile(`(?m)^waitroom_api_auto_entries_total\{outcome="` + outcome + `"\} (\d+)$`).
		FindStringSubmatch(e.get(e.stack.APIURL + "/metrics"))
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	require.NoError(e.t, err)
	return n
}

// An item in mode auto, behind a kit with auto entry: below the item's
// rate everyone goes straight to the site with a real admission (no page);
// a spike forms a line, people are sent to the page holding places in
// arrival order, a newcomer goes behind the line, and a visitor coming back
// keeps one place; once the line has drained the room is invisible again.
// The admissions on waitroom.admissions are the registrations' order.
func TestAutoModeIsInvisibleUntilALineForms(t *testing.T) {
	calm := policy("calm", 4, 1000, 60)
	calm.Mode = topics.ModeAuto
	e := newEnv(t, calm, policy("plain", 4, 1000, 60))
	e.start()
	site := autoShop(t, e.stack.APIURL)
	ctx := context.Background()
	line := queue.New(e.rdb)

	// Below the rate: one visitor after another, each straight to the site.
	quiet := func(n int) []string {
		var ids []string
		for range n {
			v := newVisitor(site)
			got := v.get(t, "calm")
			require.Equal(t, http.StatusOK, got.code, "an item with room shows no page: %+v", got)
			ids = append(ids, got.tokenID)
			again := v.get(t, "calm")
			assert.Equal(t, visit{code: http.StatusOK, tokenID: got.tokenID}, again, "the admission is kept in the cookie")
			time.Sleep(300 * time.Millisecond) // below 4 a second
		}
		return ids
	}
	first := quiet(4)
	for _, id := range first {
		until, ok, err := line.AdmittedUntil(ctx, "calm", id)
		require.NoError(t, err)
		assert.True(t, ok && until.After(time.Now()), "%s holds the line's admission", id)
	}
	waiting, err := line.Waiting(ctx, "calm", 0)
	require.NoError(t, err)
	assert.Empty(t, waiting, "nobody waited")
	assert.Equal(t, len(first), e.autoEntries("admitted"))

	// A spike of 30 at once, far above 4 a second: the bucket's 4 and the
	// ticks within the api's wait go straight through, the rest are sent to
	// the page with their places.
	spike := make([]*visitor, 30)
	seen := make([]visit, len(spike))
	var wg sync.WaitGroup
	for i := range spike {
		spike[i] = newVisitor(site)
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen[i] = spike[i].get(t, "calm")
		}()
	}
	wg.Wait()
	var queued []token.Queue
	direct := 0
	for _, s := range seen {
		switch s.code {
		case http.StatusOK:
			direct++
		case http.StatusSeeOther:
			require.Equal(t, "/items/calm/wait", s.page)
			q, err := e.signer.ParseQueue(s.place)
			require.NoError(t, err, "the page is handed the place the kit took")
			queued = append(queued, q)
		}
	}
	t.Logf("spike: %d straight through, %d sent to the page", direct, len(queued))
	require.Positive(t, direct, "the spike's first go through at the next tick")
	require.GreaterOrEqual(t, len(queued), 15, "a spike of 30 at 4 a second forms a line")
	assert.Equal(t, len(first)+direct, e.autoEntries("admitted"))
	assert.Equal(t, len(queued), e.autoEntries("late")+e.autoEntries("line"))
	lines := e.autoEntries("line")

	// The line is the queued places in arrival order.
	inLine, err := line.Waiting(ctx, "calm", 0)
	require.NoError(t, err)
	require.NotEmpty(t, inLine)
	var stillQueued []string
	for _, id := range byOffset(t, queued) {
		if slices.Contains(inLine, id) {
			stillQueued = append(stillQueued, id)
		}
	}
	assert.Equal(t, stillQueued, inLine, "the line holds the spike's places, in arrival order")

	// A newcomer while the line exists goes behind it, to the page at once.
	late := newVisitor(site)
	got := late.get(t, "calm")
	require.Equal(t, http.StatusSeeOther, got.code, "a line has formed: the page")
	lateQ, err := e.signer.ParseQueue(got.place)
	require.NoError(t, err)
	st := e.waitNotPending("calm", got.place)
	require.Equal(t, "WAITING", st.Status)
	assert.Equal(t, st.WaitingTotal, st.Position, "the newcomer is last")
	assert.Equal(t, lines+1, e.autoEntries("line"), "sent to the page at once, without waiting for a tick")
	// Coming back while waiting keeps the one place.
	again := late.get(t, "calm")
	assert.Equal(t, visit{code: http.StatusSeeOther, page: "/items/calm/wait", place: got.place}, again)

	// The line drains at 4 a second; each place, once admitted, lets its
	// visitor through the kit with that place's admission.
	e.waitStatus("calm", got.place, "ADMITTED")
	got = late.get(t, "calm")
	assert.Equal(t, visit{code: http.StatusOK, tokenID: lateQ.TokenID}, got, "back at the site with the place's admission")
	require.Eventually(t, func() bool {
		w, err := line.Waiting(ctx, "calm", 0)
		require.NoError(t, err)
		return len(w) == 0
	}, 30*time.Second, 50*time.Millisecond, "the line drains")

	// Invisible again: people go straight through.
	after := quiet(3)
	assert.Equal(t, len(first)+direct+len(after), e.autoEntries("admitted"))

	// Nobody bypassed the line: the admissions, in the order the scheduler
	// published them, are the registrations' order.
	regs := registeredInOrder(t, e, "calm")
	require.Len(t, regs, len(first)+len(spike)+1+len(after), "one place per visitor, a return visit made none")
	assert.Equal(t, regs, e.admittedOnTopic(t, "calm", len(regs)))

	// An item in another mode: the kit sends people to the page as before,
	// and records nothing for them.
	v := newVisitor(site)
	got = v.get(t, "plain")
	assert.Equal(t, visit{code: http.StatusSeeOther, page: "/items/plain/wait"}, got)
	assert.Empty(t, registeredInOrder(t, e, "plain"))
}

// The kit's place in a real browser: a visitor of an auto item with a line
// is sent to the page with the place the kit took (#queue=), and the page
// follows that place (third, behind two) instead of registering a second
// one, and takes it out of the address bar. Once admitted, the visitor's
// next visit to the shop goes straight through with that place's admission.
func TestAutoEntryHandsItsPlaceToThePageInBrowser(t *testing.T) {
	ctx := browser(t)
	calm := policy("calm", 0, 1000, 60) // paused: no room, the line stays
	calm.Mode = topics.ModeAuto
	e := newEnv(t, calm)
	e.start()
	for i := range 2 {
		e.register("calm", fmt.Sprintf("ahead-%d", i))
	}
	e.waitLine("calm", 2)
	site := autoShop(t, e.stack.APIURL, waitroomkit.WithWaitURL(e.stack.URL)) // the page through the front door

	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(site+"/shop/calm"), chromedp.WaitVisible("#position")))
	waitFor(t, ctx, `document.getElementById("status").dataset.status === "WAITING"`, 20*time.Second, "the page follows a place")
	pos, err := runRetry(ctx, chromedp.Text("#position"))
	require.NoError(t, err)
	assert.Equal(t, "3", pos, "the kit's place, behind the two")
	hash, err := runRetry(ctx, chromedp.Evaluate[string](`location.hash`))
	require.NoError(t, err)
	assert.Empty(t, hash, "the place leaves the address bar")
	line := e.waitLine("calm", 3)
	assert.Len(t, line, 3, "the page registered no second place")

	adminPut(t, e, "calm", `{"ratePerSecond":50,"maxActive":1000,"sessionTTLSeconds":60}`)
	waitFor(t, ctx, `document.getElementById("status").dataset.status === "ADMITTED"`, 20*time.Second, "admitted")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(site+"/shop/calm")))
	body, err := runRetry(ctx, chromedp.Text("body"))
	require.NoError(t, err)
	assert.Equal(t, line[2], body, "straight through with the kit's place's admission")
}
