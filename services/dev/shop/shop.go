// Package shop is the dev stack's stand-in for the site a waiting room
// protects: a checkout page and a "buy" that completes the admission, behind
// waitroomkit's middleware, exactly as a real shop would use it.
package shop

import (
	"errors"
	"html/template"
	"net/http"
	"time"

	"github.com/waitroom/waitroom/kit/go/waitroomkit"
)

// Prefix is where the shop is mounted on the front door.
const Prefix = "/shop/"

// Target is the waiting page's "continue" link into the shop
// (WR_PAGE_TARGET_URL on the dev stack).
const Target = "/shop/{itemId}?admission={admissionToken}"

var page = template.Must(template.New("shop").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Demo shop</title>
<style>
  :root { font-family: system-ui, sans-serif; color: #1d2433; background: #f4f6fb; }
  main { max-width: 34rem; margin: 8vh auto; background: #fff; border-radius: 14px; padding: 2rem 2.2rem;
         box-shadow: 0 6px 24px rgba(20, 30, 60, .10); }
  button { background: #2f9e44; color: #fff; border: 0; padding: .7rem 1.3rem; border-radius: 8px; font-weight: 600; font-size: 1rem; }
  .muted { color: #667; }
</style></head>
<body><main id="order" data-status="{{.Status}}">
<h1 id="heading">{{.Heading}}</h1>
{{if eq .Status "ADMITTED"}}
  <p class="muted">Demo shop of the dev stack, behind the waiting room (waitroomkit's middleware).</p>
  <p>Signed in as <strong id="user">{{.UserID}}</strong>; your admission lasts until <span id="expires">{{.Expires}}</span>.</p>
  <form method="post" action="/shop/{{.ItemID}}/buy"><button id="buy" type="submit">Buy</button></form>
{{else if eq .Status "COMPLETED"}}
  <p>Thank you, <strong id="user">{{.UserID}}</strong>. Your place in the waiting room went to the next in line.</p>
{{else}}
  <p>{{.Message}}</p><p><a id="back" href="{{.WaitURL}}">Back to the waiting room</a></p>
{{end}}
</main></body></html>
`))

type view struct {
	Status, Heading, ItemID, UserID, Expires, Message, WaitURL string
}

// Option changes what the shop does around each page.
type Option func(*options)

type options struct {
	slow   *Slowness
	health *waitroomkit.Health
}

// WithSlowness makes every admitted request as slow as s says.
func WithSlowness(s *Slowness) Option { return func(o *options) { o.slow = s } }

// WithHealth measures every admitted request with h, whose Run reports the
// shop's health to the room (docs/steering.md).
func WithHealth(h *waitroomkit.Health) Option { return func(o *options) { o.health = h } }

// New returns the shop: GET /shop/{itemId} (the checkout page) and POST
// /shop/{itemId}/buy (places the order and completes the admission), both
// only with a live admission for the item; anyone else is sent to the
// item's waiting page.
func New(kit *waitroomkit.Kit, opts ...Option) http.Handler {
	var o options
	for _, f := range opts {
		f(&o)
	}
	mux := http.NewServeMux()
	guard := kit.Protect(waitroomkit.ItemFromPath("itemId"))
	protect := func(h http.Handler) http.Handler {
		if o.slow != nil {
			h = o.slow.Middleware(h)
		}
		if o.health != nil {
			h = o.health.Middleware(h)
		}
		return guard(h)
	}
	mux.Handle("GET /shop/{itemId}", protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := waitroomkit.FromContext(r.Context())
		render(w, http.StatusOK, view{Status: "ADMITTED", Heading: "Checkout: " + a.ItemID, ItemID: a.ItemID, UserID: a.UserID,
			Expires: a.ExpiresAt.UTC().Format(time.TimeOnly) + " UTC"})
	})))
	mux.Handle("POST /shop/{itemId}/buy", protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, err := kit.CompleteRequest(w, r)
		switch {
		case err == nil:
			render(w, http.StatusOK, view{Status: "COMPLETED", Heading: "Order placed: " + a.ItemID, ItemID: a.ItemID, UserID: a.UserID})
		case errors.Is(err, waitroomkit.ErrEnded):
			item := r.PathValue("itemId")
			render(w, http.StatusGone, view{Status: "ENDED", Heading: "Your admission has ended", ItemID: item,
				Message: "It expired or was already used.", WaitURL: kit.WaitURL(item)})
		default:
			item := r.PathValue("itemId")
			w.Header().Set("Retry-After", "1")
			render(w, http.StatusServiceUnavailable, view{Status: "ERROR", Heading: "Try again in a moment", ItemID: item,
				Message: "The order could not be confirmed: " + err.Error(), WaitURL: r.URL.Path})
		}
	})))
	return mux
}

func render(w http.ResponseWriter, status int, v view) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = page.Execute(w, v) // the page is static; a write error means the client left
}
