package stack

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
)

// FrontDoor routes one origin to the services behind it, as a load balancer
// would in production: event streams to the notifier, everything else (the
// API and the waiting-room page) to the api. With no notifier, streams go to
// the api too, which answers 404 and the page falls back to polling. shop,
// when not nil, serves /shop/ (the demo shop the page's "continue" leads to).
// /metrics is answered 404, as deploy/compose's Caddyfile does: metrics are
// read on each service's own address.
func FrontDoor(api, notifier string, shop http.Handler) (http.Handler, error) {
	apiURL, err := url.Parse(api)
	if err != nil {
		return nil, err
	}
	toAPI := httputil.NewSingleHostReverseProxy(apiURL)
	toEvents := toAPI
	if notifier != "" {
		nURL, err := url.Parse(notifier)
		if err != nil {
			return nil, err
		}
		toEvents = httputil.NewSingleHostReverseProxy(nURL)
		toEvents.FlushInterval = -1 // stream every event at once
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := strings.ToLower(r.URL.Path); p == "/metrics" || strings.HasPrefix(p, "/metrics/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"code":"NOT_FOUND","message":"no route /metrics"}}`))
			return
		}
		if shop != nil && strings.HasPrefix(r.URL.Path, "/shop/") {
			shop.ServeHTTP(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/api/v1/items/") && strings.HasSuffix(r.URL.Path, "/events") {
			toEvents.ServeHTTP(w, r)
			return
		}
		toAPI.ServeHTTP(w, r)
	}), nil
}
