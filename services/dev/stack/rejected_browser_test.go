package stack_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/topics"
)

// A refused registration in a real browser shows the operator's message (the
// item's rejectMessage), never "Reconnecting…": refused at the door (an item
// in reject mode answers 409 REGISTRATION_REJECTED), and refused by the line
// after the api took it (applied, never placed: the stream's "rejected" event,
// which waitroom.js once did not listen to, so the stream ended unheard and
// reconnected for ever).
func TestRejectedRegistrationShowsOperatorsMessageInBrowser(t *testing.T) {
	ctx := browser(t)
	shut := item("shut")
	shut.Mode, shut.RejectMessage = topics.ModeReject, "Sold through our partners only: no line today"
	tix := item("tix")
	tix.RejectMessage = "Staff codes are used up; the public sale opens at noon"
	e := newEnv(t, shut, tix)
	e.start()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	shows := func(status, message string) {
		t.Helper()
		_, err := runRetry(ctx, chromedp.Poll[bool](`document.getElementById("status").dataset.status === "`+status+`"`,
			chromedp.WithPollingTimeout(20*time.Second)))
		st, _ := runRetry(ctx, chromedp.Evaluate[string](`document.getElementById("status").dataset.status`))
		require.NoError(t, err, "the page shows %s (it shows %q)", status, st)
		msg, err := runRetry(ctx, chromedp.Text("#message"))
		require.NoError(t, err)
		assert.Equal(t, message, msg)
		text, err := runRetry(ctx, chromedp.Text("#status"))
		require.NoError(t, err)
		assert.Equal(t, "We could not place you in line", text)
	}

	// At the door: the api refuses with the operator's message.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/shut/wait?userId=refused")))
	shows("REJECTED", shut.RejectMessage)
	head, err := runRetry(ctx, chromedp.Text("#heading"))
	require.NoError(t, err)
	assert.Equal(t, "We could not place you in line for shut", head)

	// By the line: a record the consumer dead-letters (its itemId does not
	// match its key) is applied and never placed; its queue token reads
	// REJECTED. The page resumes it from storage, as after a reload.
	bad := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "tok-never", ItemID: "other", UserID: "never", RequestedAt: 1}
	good := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "tok-after", ItemID: "tix", UserID: "after", RequestedAt: 1}
	recs := []*kgo.Record{
		{Topic: topics.Registrations, Key: []byte("tix"), Value: topics.Encode(&bad)},
		{Topic: topics.Registrations, Key: []byte("tix"), Value: topics.Encode(&good)},
	}
	require.NoError(t, e.kcl.ProduceSync(ctx, recs...).FirstErr())
	e.waitLine("tix", 1)
	tok, err := e.signer.IssueQueue(token.Queue{TokenID: "tok-never", ItemID: "tix", UserID: "never", Partition: recs[0].Partition, Offset: recs[0].Offset}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, "REJECTED", e.waitNotPending("tix", tok).Status)
	at := "/api/v1/items/tix/registrations/" + tok
	stored, err := json.Marshal(map[string]string{"token": tok, "statusUrl": at, "eventsUrl": at + "/events"})
	require.NoError(t, err)
	quoted, err := json.Marshal(string(stored))
	require.NoError(t, err)
	_, err = runRetry(ctx, chromedp.Evaluate[bool](`localStorage.setItem("waitroom:tix", `+string(quoted)+`), true`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/tix/wait")))
	shows("REJECTED", tix.RejectMessage)
	transport, err := runRetry(ctx, chromedp.Evaluate[string](`document.body.dataset.transport || ""`))
	require.NoError(t, err)
	assert.Equal(t, "sse", transport, "told by the stream's rejected event")
	// A browser retries a stream that ended after the stream's retry: (3 s): had the
	// page missed the event, it would say RECONNECTING by now.
	time.Sleep(4 * time.Second)
	st, err := runRetry(ctx, chromedp.Evaluate[string](`document.getElementById("status").dataset.status`))
	require.NoError(t, err)
	assert.Equal(t, "REJECTED", st, "no reconnect after the final event")
	left, err := runRetry(ctx, chromedp.Evaluate[bool](`localStorage.getItem("waitroom:tix") === null`))
	require.NoError(t, err)
	assert.True(t, left, "a final status forgets the stored registration")
}
