package waitroomkit

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The meter sits inside Protect: it counts each request in a latency
// bucket, a 5xx as an error, an admission's first request as its arrival
// (with its delay since the token was issued), and an admission seen within
// the idle time as an active session; a report empties the window and goes
// to the api's signal route with the signal token.
func TestHealthMeasuresAndReports(t *testing.T) {
	is := newIssuer(t, "a1")
	var got SignalReport
	var auth string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/items/gig/signal" && r.Method == http.MethodPost {
			auth = r.Header.Get("Authorization")
			if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
				t.Errorf("decode: %v", err)
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		is.jwks.ServeHTTP(w, r)
	}))
	t.Cleanup(api.Close)
	kit, err := New(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	h := kit.Health("gig", "site-secret", WithInstance("web-1"), WithBounds([]float64{50, 1000}))
	shop := httptest.NewServer(kit.Protect(Item("gig"))(h.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))))
	t.Cleanup(shop.Close)
	c := claimsFor("gig", time.Now().Add(time.Minute))
	c["iat"] = time.Now().Add(-3 * time.Second).Unix()
	tok := is.token(t, "a1", c)
	for _, path := range []string{"/", "/", "/fail"} {
		req, _ := http.NewRequest(http.MethodGet, shop.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	r := h.Report()
	var n uint64
	for _, c := range r.Counts {
		n += c
	}
	if n != 3 || r.Counts[0] != 3 || r.Errors != 1 || r.Arrivals != 1 || r.Active != 1 || len(r.Counts) != 3 {
		t.Fatalf("report %+v: want 3 fast requests, 1 error, 1 arrival, 1 active", r)
	}
	if r.ArrivalDelayMsSum < 2000 || r.ArrivalDelayMsSum > 5000 {
		t.Fatalf("arrival delay %d ms, want about 3000 (iat 3 s ago)", r.ArrivalDelayMsSum)
	}
	if next := h.Report(); next.Counts[0] != 0 || next.Arrivals != 0 || next.Active != 1 {
		t.Fatalf("next window %+v: counts start again, the session stays active", next)
	}
	if err := h.Post(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if auth != "Bearer site-secret" || got.Instance != "web-1" || got.Arrivals != 1 || got.Errors != 1 {
		t.Fatalf("posted %+v with %q", got, auth)
	}
}
