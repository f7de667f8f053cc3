package stack_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The page on an item that asks a proof-of-work: waitroom.js gets 403
// POW_REQUIRED, solves the challenge in a Web Worker, registers with the
// proof and is admitted. It also times the solver at difficulty 18 in the
// browser (logged: the README's "about a second" figure).
func TestProofOfWorkPageInBrowser(t *testing.T) {
	ctx := browser(t)
	it := policy("guarded", 50, 0, 60)
	it.Name = "Guarded drop"
	it.PowDifficulty = 14
	e := newEnv(t, it)
	e.start()

	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/guarded/wait?userId=browser-pow")))
	_, err := runRetry(ctx, chromedp.Poll[bool](`document.getElementById("status").dataset.status === "ADMITTED"`,
		chromedp.WithPollingTimeout(60*time.Second)))
	require.NoError(t, err)
	work, err := runRetry(ctx, chromedp.Evaluate[string](`document.body.dataset.work || ""`))
	require.NoError(t, err)
	require.Equal(t, "14", work, "the page solved the item's proof-of-work")
	errText, err := runRetry(ctx, chromedp.Text("#error"))
	require.NoError(t, err)
	require.Empty(t, errText)
	// The registration the page made is the one in line (admitted).
	st, err := runRetry(ctx, chromedp.Evaluate[string](`JSON.parse(localStorage.getItem("waitroom:guarded")).token`))
	require.NoError(t, err)
	require.Equal(t, "ADMITTED", e.status("guarded", st).Status)

	ms, err := runRetry(ctx, chromedp.Evaluate[float64](`(async () => {
		const src = await (await fetch("/waitroom-pow.js")).text();
		const w = new Worker(URL.createObjectURL(new Blob([src], { type: "text/javascript" })));
		let total = 0;
		for (let i = 0; i < 5; i++) {
			const t0 = performance.now();
			await new Promise((res) => { w.onmessage = res; w.postMessage({ challenge: "wrpow1.timing-" + i, difficulty: 18 }); });
			total += performance.now() - t0;
		}
		w.terminate();
		return total / 5;
	})()`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	t.Logf("proof-of-work at difficulty 18 in headless Chromium: %.0f ms on average over 5 challenges", ms)
}
