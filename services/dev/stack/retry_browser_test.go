package stack_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitroom.js in a real browser, through the front door: the answer to its
// registration is lost after the broker took the record (the page's fetch
// fails as on a dropped link), so it registers again with the same requestId
// and gets the same place back. The line holds one place for it, not two
// (a place nobody holds would be admitted and hold an admission for a whole
// session: the chaos run's collapsed line, RELIABILITY.md).
func TestPageRetryAfterALostAnswerKeepsOnePlaceInBrowser(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, policy("retry", 0, 0, 60), policy("other", 0, 0, 60)) // paused: the line stays
	e.start()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(e.stack.URL+"/items/other/wait?userId=page"),
		chromedp.WaitVisible("#position"),
	))
	out, err := runRetry(ctx, chromedp.Evaluate[string](`(async () => {
		const real = window.fetch;
		let lost = null;
		const posts = [];
		window.fetch = async (url, init) => {
			const r = await real(url, init);
			if (init && init.method === "POST" && String(url).endsWith("/items/retry/registrations")) {
				posts.push(JSON.parse(init.body).requestId);
				if (!lost) {
					lost = await r.json(); // the broker has the record; the page never hears
					throw new TypeError("Failed to fetch");
				}
			}
			return r;
		};
		try {
			const reg = await new Promise((ok, bad) => Waitroom.join({
				itemId: "retry", userId: "browser-user", storage: null, onJoin: ok, onError: bad }));
			return JSON.stringify({ lost: lost.token, kept: reg.token, posts });
		} finally {
			window.fetch = real;
		}
	})()`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	var got struct {
		Lost, Kept string
		Posts      []string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got.Posts, 2, "one lost answer, one retry")
	assert.NotEmpty(t, got.Posts[0])
	assert.Equal(t, got.Posts[0], got.Posts[1], "the retry carries the same requestId")
	lost, err := e.signer.ParseQueue(got.Lost)
	require.NoError(t, err)
	kept, err := e.signer.ParseQueue(got.Kept)
	require.NoError(t, err)
	assert.NotEqual(t, lost.Offset, kept.Offset, "both records are on the topic")
	require.Equal(t, lost.TokenID, kept.TokenID, "the retry names the first try's place")

	st := e.waitStatus("retry", got.Kept, "WAITING") // both records applied (the retry's is the later)
	assert.Equal(t, int64(1), st.Position)
	assert.Equal(t, int64(1), st.WaitingTotal, "one place, not two")
	assert.Len(t, e.waitLine("retry", 1), 1)
}
