package waitroomkit

import (
	"context"
	"errors"
	"net/http"
	"strings"
)

type ctxKey struct{}

// FromContext returns the admission the middleware let the request through
// with.
func FromContext(ctx context.Context) (Admission, bool) {
	a, ok := ctx.Value(ctxKey{}).(Admission)
	return a, ok
}

// ItemFromPath reads the item from a path wildcard of Go's ServeMux
// ("GET /shop/{itemId}/" → ItemFromPath("itemId")).
func ItemFromPath(name string) func(*http.Request) string {
	return func(r *http.Request) string { return r.PathValue(name) }
}

// Item always protects the same item.
func Item(id string) func(*http.Request) string {
	return func(*http.Request) string { return id }
}

// Protect returns middleware that lets a request through only with a live
// admission token for the item itemOf names. The token comes from the
// "continue" link's query parameter (then kept in an HttpOnly cookie, and a
// GET is redirected to the same URL without it, so the token leaves the
// address bar), an "Authorization: Bearer" header, or that cookie. A valid
// cookie wins over the query parameter: a link cannot swap someone's
// admission for another (session fixation). Anyone else is sent to the
// item's waiting page (303, see RedirectURL). The cookie is removed when its
// token is refused, but kept when the api cannot be reached.
//
// The operator's flag (WithFlag) comes first: an item switched off
// OffThrough lets everyone through, OffPaused shows the paused page. When the
// room cannot answer (a token's keys cannot be fetched, or no token while the
// last fetch of the keys failed), an item that fails open lets the request
// through; one that fails closed (the default) answers as above. A request
// let through unchecked has an Admission with only ItemID and Unchecked.
func (k *Kit) Protect(itemOf func(*http.Request) string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			item := itemOf(r)
			if item == "" {
				http.NotFound(w, r)
				return
			}
			flag := k.itemFlag(item)
			switch flag.Off {
			case OffThrough:
				k.pass(w, r, next, item, UncheckedOff)
				return
			case OffPaused:
				if k.paused != nil {
					k.paused.ServeHTTP(w, r)
				} else {
					pausedPage(w, r)
				}
				return
			}
			raw, from := k.tokenOf(r, item)
			inQuery := from == "query"
			a, err := Admission{}, ErrNoToken
			// A live cookie wins over a link's token, which is dropped: a link
			// someone else sent cannot swap the visitor's admission for theirs.
			if inQuery {
				if c, cerr := r.Cookie(k.cookieName(item)); cerr == nil {
					a, err = k.Verify(r.Context(), c.Value, item)
				}
			}
			if err != nil {
				a, err = k.Verify(r.Context(), raw, item)
				// The room cannot answer: a token it cannot check, or a
				// visitor with none while its api is down (asked again when
				// it was last heard from minRefresh ago or more).
				if flag.FailMode == FailOpen && (errors.Is(err, ErrUnavailable) || (errors.Is(err, ErrNoToken) && k.keys.downNow(r.Context()))) {
					k.pass(w, r, next, item, UncheckedFailOpen)
					return
				}
				if err != nil {
					if from == "cookie" && !errors.Is(err, ErrUnavailable) {
						k.clearCookie(w, r, item)
					}
					if !errors.Is(err, ErrUnavailable) && k.enter(w, r, next, item) {
						return
					}
					k.deny(w, r, item, err)
					return
				}
				if inQuery {
					k.setCookie(w, r, a)
				}
			}
			if inQuery && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
				u := *r.URL
				q := u.Query()
				q.Del(k.param)
				u.RawQuery = q.Encode()
				http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, a)))
		})
	}
}

// pass lets r through without a checked token, saying why.
func (k *Kit) pass(w http.ResponseWriter, r *http.Request, next http.Handler, item, why string) {
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, Admission{ItemID: item, Unchecked: why})))
}

// CompleteRequest completes the admission the middleware let r through with
// (see Complete) and removes its cookie.
func (k *Kit) CompleteRequest(w http.ResponseWriter, r *http.Request) (Admission, error) {
	a, ok := FromContext(r.Context())
	if !ok {
		return Admission{}, ErrNoToken
	}
	done, err := k.Complete(r.Context(), a.Raw, a.ItemID)
	if err == nil || errors.Is(err, ErrEnded) {
		k.clearCookie(w, r, a.ItemID)
	}
	if err != nil {
		return Admission{}, err
	}
	done.ExpiresAt = a.ExpiresAt
	return done, nil
}

func (k *Kit) tokenOf(r *http.Request, item string) (raw, from string) {
	if t := r.URL.Query().Get(k.param); t != "" {
		return t, "query"
	}
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:]), "header"
	}
	if c, err := r.Cookie(k.cookieName(item)); err == nil {
		return c.Value, "cookie"
	}
	return "", ""
}

func (k *Kit) deny(w http.ResponseWriter, r *http.Request, item string, err error) {
	if k.denied != nil {
		k.denied(w, r, item, err)
		return
	}
	if errors.Is(err, ErrUnavailable) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "admissions cannot be checked right now; retry shortly", http.StatusServiceUnavailable)
		return
	}
	http.Redirect(w, r, k.RedirectURL(r, item), http.StatusSeeOther)
}

// cookieName is the cookie of item: the prefix and the item with every
// character a cookie name cannot hold replaced by '_'.
func (k *Kit) cookieName(item string) string { return cookieNameOf(k.cookie, item) }

func cookieNameOf(prefix, item string) string {
	b := []byte(prefix + "_" + item)
	for i := len(prefix) + 1; i < len(b); i++ {
		c := b[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

func (k *Kit) setCookie(w http.ResponseWriter, r *http.Request, a Admission) {
	http.SetCookie(w, &http.Cookie{Name: k.cookieName(a.ItemID), Value: a.Raw, Path: "/", Expires: a.ExpiresAt,
		HttpOnly: true, Secure: k.secure || r.TLS != nil, SameSite: http.SameSiteLaxMode})
}

func (k *Kit) clearCookie(w http.ResponseWriter, r *http.Request, item string) {
	http.SetCookie(w, &http.Cookie{Name: k.cookieName(item), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: k.secure || r.TLS != nil, SameSite: http.SameSiteLaxMode})
}
