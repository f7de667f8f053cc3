package stack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/security/assertion"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/services/dev/stack"
	"go.uber.org/zap/zaptest"
)

const (
	siteIssuer = "https://shop.example"
	siteSecret = "the-shop-s-assertion-secret-of-32-bytes-or-more"
)

// startAsserted starts the stack trusting the shop's HS256 assertions.
func (e *env) startAsserted() {
	e.t.Helper()
	s, err := stack.Start(context.Background(), stack.Options{Brokers: e.brokers, Redis: &e.rcfg, TokenKey: testKey,
		AdminToken: adminToken, Tick: 100 * time.Millisecond, Log: zaptest.NewLogger(e.t).Named("stack"),
		Assertion: &assertion.Config{Issuer: siteIssuer, Secret: siteSecret, MaxTTL: 10 * time.Minute}})
	require.NoError(e.t, err)
	e.stack = s
	e.t.Cleanup(func() {
		e.http.CloseIdleConnections()
		require.NoError(e.t, s.Stop())
	})
}

// assertionFor signs an assertion the way a site does (waitroomkit's
// Asserter, or any JWT library): change edits the claims first.
func assertionFor(t *testing.T, user, item, secret string, change func(jwt.MapClaims)) string {
	t.Helper()
	now := time.Now()
	c := jwt.MapClaims{"iss": siteIssuer, "aud": assertion.Audience, "sub": user, "itm": item,
		"iat": now.Unix(), "exp": now.Add(2 * time.Minute).Unix(), "jti": strings.ToLower(time.Now().Format("150405.000000000")) + user}
	if change != nil {
		change(c)
	}
	raw, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
	require.NoError(t, err)
	return raw
}

// admittedOnStream opens tok's event stream and returns the admission token
// of its admitted event.
func (e *env) admittedOnStream(eventsURL string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.stack.NotifierURL+eventsURL, nil)
	require.NoError(e.t, err)
	resp, err := (&http.Client{}).Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	require.Equal(e.t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			event = ev
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && event == "admitted" {
			var a struct {
				AdmissionToken string `json:"admissionToken"`
			}
			require.NoError(e.t, json.Unmarshal([]byte(data), &a))
			return a.AdmissionToken
		}
	}
	e.t.Fatalf("the stream ended without an admission: %v", sc.Err())
	return ""
}

// A userId a client types is a label: someone who knows only the string
// "alice" gets a place of their own, and cannot read, leave, verify or
// complete Alice's place, nor receive her admission, by status or stream.
func TestAnImpostorWithTheSameUserIdGetsNothingOfThePlace(t *testing.T) {
	e := newEnv(t, policy("tix", 0, 10, 60))
	e.startAsserted()

	alice, aq := e.register("tix", "alice")
	thief, tq := e.register("tix", "alice")
	require.NotEqual(t, aq.TokenID, tq.TokenID)
	a := e.waitStatus("tix", alice.Token, "WAITING")
	m := e.waitStatus("tix", thief.Token, "WAITING")
	assert.Equal(t, int64(1), a.Position)
	assert.Equal(t, int64(2), m.Position, "the second 'alice' waits behind: a place of its own")
	assert.Equal(t, aq.TokenID, a.TokenID)
	assert.Equal(t, tq.TokenID, m.TokenID, "the thief's answer names only its own token")
	assert.NotContains(t, string(e.do(http.MethodGet, "/api/v1/items/tix/registrations/"+thief.Token, nil).Body), aq.TokenID)

	// The thief leaves: only its own place goes.
	left := e.do(http.MethodDelete, "/api/v1/items/tix/registrations/"+thief.Token, nil)
	require.Equal(t, http.StatusAccepted, left.Code, "%s", left.Body)
	e.waitStatus("tix", thief.Token, "LEFT")
	a = e.status("tix", alice.Token)
	assert.Equal(t, "WAITING", a.Status, "alice keeps her place")
	assert.Equal(t, int64(1), a.Position)

	// Another thief registers as alice, then admission opens: each is
	// admitted with an admission token of its own place, by status and by
	// stream, and completing the thief's admission leaves Alice's live.
	thief2, t2q := e.register("tix", "alice")
	e.waitStatus("tix", thief2.Token, "WAITING")
	opened := policy("tix", 50, 10, 60)
	opened.Version = 2
	require.NoError(t, stack.PublishItems(context.Background(), e.kcl, opened))
	aAdm := e.waitStatus("tix", alice.Token, "ADMITTED").AdmissionToken
	tAdm := e.waitStatus("tix", thief2.Token, "ADMITTED").AdmissionToken
	admit, err := token.New(token.EdDSA, registration.DevAdmissionKey, "")
	require.NoError(t, err)
	for raw, want := range map[string]string{aAdm: aq.TokenID, tAdm: t2q.TokenID, e.admittedOnStream(thief2.EventsURL): t2q.TokenID} {
		adm, err := admit.ParseAdmission(raw)
		require.NoError(t, err)
		assert.Equal(t, want, adm.TokenID, "an admission is of the token's own place")
	}
	done := e.do(http.MethodPost, "/api/v1/admissions/complete", []byte(`{"token":"`+tAdm+`","itemId":"tix"}`))
	require.Equal(t, http.StatusOK, done.Code, "%s", done.Body)
	live := e.do(http.MethodPost, "/api/v1/admissions/verify", []byte(`{"token":"`+aAdm+`","itemId":"tix"}`))
	assert.Equal(t, http.StatusOK, live.Code, "alice's admission stays live: %s", live.Body)
	assert.Equal(t, "ADMITTED", e.status("tix", alice.Token).Status)
}

// With a site-signed assertion the userId is proven: the same user on a new
// device resumes their one place (the status answer hands over a token of
// it), each assertion registers once, and a forged, expired, other-item or
// other-issuer assertion is refused.
func TestAProvenUserResumesTheirPlaceOnANewDevice(t *testing.T) {
	e := newEnv(t, policy("vip", 0, 10, 60), policy("other", 0, 10, 60))
	e.startAsserted()

	first := assertionFor(t, "bob", "vip", siteSecret, nil)
	a := e.registerWith("vip", map[string]any{"assertion": first})
	require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
	var laptop httpapi.RegisterResponse
	a.decode(t, &laptop)
	assert.Equal(t, "bob", laptop.UserID)
	e.waitStatus("vip", laptop.Token, "WAITING")

	// Someone typing "bob" gets a place of their own behind him.
	typed, _ := e.register("vip", "bob")
	st := e.waitStatus("vip", typed.Token, "WAITING")
	assert.Equal(t, int64(2), st.Position)
	assert.Empty(t, st.Token, "a typed name never resumes anyone's place")

	// Bob's phone: a new assertion, a new registration, the same place.
	a = e.registerWith("vip", map[string]any{"assertion": assertionFor(t, "bob", "vip", siteSecret, nil)})
	require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
	var phone httpapi.RegisterResponse
	a.decode(t, &phone)
	var resumed httpapi.StatusResponse
	require.Eventually(t, func() bool {
		resumed = e.status("vip", phone.Token)
		return resumed.Status == "WAITING"
	}, 20*time.Second, 20*time.Millisecond, "last %+v", resumed)
	assert.Equal(t, int64(1), resumed.Position, "bob's one place")
	assert.Equal(t, laptop.TokenID, resumed.TokenID)
	require.NotEmpty(t, resumed.Token, "the answer hands over a token of the place")
	q, err := e.signer.ParseQueue(resumed.Token)
	require.NoError(t, err)
	assert.Equal(t, laptop.TokenID, q.TokenID)
	assert.Equal(t, "WAITING", e.status("vip", resumed.Token).Status)
	assert.Len(t, e.waitLine("vip", 2), 2, "two places: bob's and the typist's")

	// Refusals.
	for name, tc := range map[string]struct {
		item    string
		body    map[string]any
		code    int
		errCode string
	}{
		"used twice": {"vip", map[string]any{"assertion": first}, http.StatusUnauthorized, "ASSERTION_REUSED"},
		"forged":     {"vip", map[string]any{"assertion": assertionFor(t, "bob", "vip", "another-secret-of-at-least-thirty-two-bytes", nil)}, http.StatusUnauthorized, "ASSERTION_INVALID"},
		"expired": {"vip", map[string]any{"assertion": assertionFor(t, "bob", "vip", siteSecret, func(c jwt.MapClaims) {
			c["iat"], c["exp"] = time.Now().Add(-5*time.Minute).Unix(), time.Now().Add(-time.Minute).Unix()
		})}, http.StatusUnauthorized, "ASSERTION_EXPIRED"},
		"other item": {"other", map[string]any{"assertion": assertionFor(t, "bob", "vip", siteSecret, nil)}, http.StatusUnauthorized, "ASSERTION_INVALID"},
		"other issuer": {"vip", map[string]any{"assertion": assertionFor(t, "bob", "vip", siteSecret, func(c jwt.MapClaims) {
			c["iss"] = "https://evil.example"
		})}, http.StatusUnauthorized, "ASSERTION_INVALID"},
		"too long-lived": {"vip", map[string]any{"assertion": assertionFor(t, "bob", "vip", siteSecret, func(c jwt.MapClaims) {
			c["exp"] = time.Now().Add(time.Hour).Unix()
		})}, http.StatusUnauthorized, "ASSERTION_INVALID"},
		"another user in the body": {"vip", map[string]any{"userId": "mallory", "assertion": assertionFor(t, "bob", "vip", siteSecret, nil)}, http.StatusBadRequest, "ASSERTION_USER_MISMATCH"},
	} {
		got := e.registerWith(tc.item, tc.body)
		assert.Equal(t, tc.code, got.Code, "%s: %s", name, got.Body)
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		got.decode(t, &body)
		assert.Equal(t, tc.errCode, body.Error.Code, name)
		assert.NotEmpty(t, body.Error.Message, name)
	}
}

// The waiting page in two browsers with the same userId in the URL: the
// second gets a place of its own behind the first and sees nothing of the
// first one's (its page never shows position 1, its token is its own).
func TestSameUserIdInTwoBrowsersShareNothingInBrowser(t *testing.T) {
	// Two profiles, two localStorages; the deadlines bound the tabs' lives
	// (a tab ends with the context its first action ran under).
	first, cancel1 := context.WithTimeout(browser(t), 90*time.Second)
	defer cancel1()
	second, cancel2 := context.WithTimeout(browser(t), 90*time.Second)
	defer cancel2()
	e := newEnv(t, policy("pair", 0, 10, 60))
	e.start()
	waiting := func(ctx context.Context) (position, token string) {
		t.Helper()
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/pair/wait?userId=alice")))
		_, err := runRetry(ctx, chromedp.Poll[bool](`document.getElementById("status").dataset.status === "WAITING" && document.getElementById("position").textContent !== ""`,
			chromedp.WithPollingTimeout(30*time.Second)))
		require.NoError(t, err)
		position, err = runRetry(ctx, chromedp.Text("#position"))
		require.NoError(t, err)
		token, err = runRetry(ctx, chromedp.Evaluate[string](`JSON.parse(localStorage.getItem("waitroom:pair")).token`))
		require.NoError(t, err)
		return position, token
	}
	pos1, tok1 := waiting(first)
	assert.Equal(t, "1", pos1)
	pos2, tok2 := waiting(second)
	assert.Equal(t, "2", pos2, "the second alice waits behind the first")
	q1, err := e.signer.ParseQueue(tok1)
	require.NoError(t, err)
	q2, err := e.signer.ParseQueue(tok2)
	require.NoError(t, err)
	assert.NotEqual(t, q1.TokenID, q2.TokenID)
	st := e.status("pair", tok2)
	assert.Equal(t, q2.TokenID, st.TokenID, "the second browser's token reads its own place")
	assert.Equal(t, int64(2), st.Position)

	// Leaving from the second browser leaves the first one's place alone.
	_, err = chromedp.Run(second, chromedp.Evaluate[int](`fetch(JSON.parse(localStorage.getItem("waitroom:pair")).statusUrl, {method: "DELETE"}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	e.waitStatus("pair", tok2, "LEFT")
	st = e.status("pair", tok1)
	assert.Equal(t, "WAITING", st.Status)
	assert.Equal(t, int64(1), st.Position)
	shown, err := chromedp.Run(first, chromedp.Text("#position"))
	require.NoError(t, err)
	assert.Equal(t, "1", shown)
}
