package waitroomkit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// QueueParam is the key of the waiting page's URL fragment that hands it
// the place the kit registered (#queue=<queue token>): the page follows that
// place instead of registering again. A fragment never reaches a server or
// a Referer header.
const QueueParam = "queue"

// autoRecheck is how long the kit remembers that an item is not in mode
// auto (the api's 409 NOT_AUTO) before it asks again: an operator's switch
// to auto reaches the kit within it.
const autoRecheck = 10 * time.Second

// autoState is what the kit keeps for auto entry.
type autoState struct {
	mu      sync.Mutex
	notAuto map[string]time.Time // item → when to ask the api again
}

// WithAutoEntry makes the middleware register a GET without a live
// admission itself, for items the operator set to mode auto: while the item
// has room, the api answers with the admission (the scheduler's own, read
// back within the api's short wait), and the request goes straight on to
// the site, the token kept in the usual cookie: no waiting page. Once a line
// has formed the visitor is sent to the waiting page with the place the kit
// took (the page's URL fragment, and a cookie the kit reads on the next
// visit, so a visitor has one place however often they come back), behind
// everyone already waiting. An item in another mode is answered as without
// this option: the api refuses the registration and the kit remembers that
// for 10 s.
//
// The kit registers from the shop's host: add the shop's addresses to the
// api's WR_TRUSTED_PROXIES, so its per-address limit counts the visitor's
// address (the kit sends it in X-Forwarded-For), not the shop's. Items that
// ask for proof-of-work are registered by the page as before.
func WithAutoEntry() Option {
	return func(k *Kit) { k.auto = &autoState{notAuto: map[string]time.Time{}} }
}

// registerAnswer is the api's answer to a registration (200 or 202).
type registerAnswer struct {
	Status         string `json:"status"`
	Token          string `json:"token"`
	AdmissionToken string `json:"admissionToken"`
}

// enter tries auto entry for r, a request for item without a live
// admission: it lets r through with an admission, or sends it to the page
// holding its place, and reports true; false when auto entry does not apply
// (not a GET, the item not in mode auto, the api refusing or down), and
// the caller answers as usual.
func (k *Kit) enter(w http.ResponseWriter, r *http.Request, next http.Handler, item string) bool {
	if k.auto == nil || r.Method != http.MethodGet || !k.mayBeAuto(item) {
		return false
	}
	ctx := r.Context()
	if c, err := r.Cookie(k.queueCookieName(item)); err == nil && c.Value != "" {
		switch st, tok, err := k.placeStatus(ctx, item, c.Value); {
		case err != nil:
			return false
		case st == "ADMITTED":
			return k.enterWith(w, r, next, item, tok)
		case st == "PENDING" || st == "WAITING" || st == "PRE_QUEUE":
			k.toPage(w, r, item, c.Value)
			return true
		}
		// The place ended (or its token is no longer valid): a new one.
	}
	ans, err := k.registerAuto(ctx, r, item)
	switch {
	case err != nil:
		return false
	case ans.Status == "ADMITTED":
		return k.enterWith(w, r, next, item, ans.AdmissionToken)
	case ans.Token != "":
		k.toPage(w, r, item, ans.Token)
		return true
	}
	return false
}

// enterWith lets r through with the admission raw, once it verifies.
func (k *Kit) enterWith(w http.ResponseWriter, r *http.Request, next http.Handler, item, raw string) bool {
	a, err := k.VerifyOffline(r.Context(), raw, item)
	if err != nil {
		return false
	}
	k.setCookie(w, r, a)
	k.clearQueueCookie(w, r, item)
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, a)))
	return true
}

// toPage sends r to item's waiting page with the place tok, kept in a
// cookie for the next visit.
func (k *Kit) toPage(w http.ResponseWriter, r *http.Request, item, tok string) {
	http.SetCookie(w, &http.Cookie{Name: k.queueCookieName(item), Value: tok, Path: "/",
		HttpOnly: true, Secure: k.secure || r.TLS != nil, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, k.WaitURL(item)+"#"+QueueParam+"="+url.QueryEscape(tok), http.StatusSeeOther)
}

// mayBeAuto is false while the api said item is not in mode auto, less
// than autoRecheck ago.
func (k *Kit) mayBeAuto(item string) bool {
	k.auto.mu.Lock()
	defer k.auto.mu.Unlock()
	until, ok := k.auto.notAuto[item]
	if ok && k.now().Before(until) {
		return false
	}
	delete(k.auto.notAuto, item)
	return true
}

func (k *Kit) markNotAuto(item string) {
	k.auto.mu.Lock()
	defer k.auto.mu.Unlock()
	k.auto.notAuto[item] = k.now().Add(autoRecheck)
}

// registerAuto registers r's visitor for item with auto entry: anonymous,
// or the user WithAssertions names, proven by an assertion.
func (k *Kit) registerAuto(ctx context.Context, r *http.Request, item string) (registerAnswer, error) {
	body := map[string]any{"auto": true, "requestId": "kit-" + rand.Text()}
	if k.asserter != nil {
		if user, ok := k.userOf(r); ok {
			if a, err := k.asserter.Assert(user, item); err == nil {
				body["assertion"] = a
			}
		}
	}
	b, _ := json.Marshal(body) // strings and a bool always marshal
	path := "/api/v1/items/" + url.PathEscape(item) + "/registrations"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.api+path, bytes.NewReader(b))
	if err != nil {
		return registerAnswer{}, fmt.Errorf("waitroomkit: build request %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	forwardClient(req, r)
	var ans registerAnswer
	var ae *APIError
	err = k.do(req, &ans)
	if errors.As(err, &ae) && ae.Status == http.StatusConflict && ae.Code == "NOT_AUTO" {
		k.markNotAuto(item)
	}
	return ans, err
}

// placeStatus reads the status of the place tok holds: its status and, when
// ADMITTED, the admission token.
func (k *Kit) placeStatus(ctx context.Context, item, tok string) (status, admission string, err error) {
	path := "/api/v1/items/" + url.PathEscape(item) + "/registrations/current"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.api+path, nil)
	if err != nil {
		return "", "", fmt.Errorf("waitroomkit: build request %s: %w", path, err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	var st struct {
		Status         string `json:"status"`
		AdmissionToken string `json:"admissionToken"`
	}
	var ae *APIError
	switch err := k.do(req, &st); {
	case errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden):
		return "GONE", "", nil // the token no longer reads a place: a new one
	case err != nil:
		return "", "", err
	}
	return st.Status, st.AdmissionToken, nil
}

// forwardClient names r's client to the api (X-Forwarded-For, appended to
// what r already carried, and its User-Agent): the api trusts it only from
// its WR_TRUSTED_PROXIES.
func forwardClient(req, r *http.Request) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if prior := r.Header.Get("X-Forwarded-For"); prior != "" {
		host = prior + ", " + host
	}
	req.Header.Set("X-Forwarded-For", host)
	if ua := r.UserAgent(); ua != "" {
		req.Header.Set("User-Agent", ua)
	}
}

// queueCookieName is the cookie that keeps the place the kit took for item:
// the admission cookie's prefix and "-place", which no admission cookie
// (prefix, "_", item) can be.
func (k *Kit) queueCookieName(item string) string { return cookieNameOf(k.cookie+"-place", item) }

func (k *Kit) clearQueueCookie(w http.ResponseWriter, r *http.Request, item string) {
	if _, err := r.Cookie(k.queueCookieName(item)); err != nil {
		return
	}
	http.SetCookie(w, &http.Cookie{Name: k.queueCookieName(item), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: k.secure || r.TLS != nil, SameSite: http.SameSiteLaxMode})
}
