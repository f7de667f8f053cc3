package chaos

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// A poller sends back the cursor of the last WAITING answer, as the waiting
// page does, and keeps it across answers that carry none.
func TestThePollerSendsBackTheLastCursor(t *testing.T) {
	answers := []string{
		`{"status":"WAITING","position":5,"cursor":"5.1.a"}`,
		`{"status":"PENDING"}`,
		`{"status":"WAITING","position":4,"cursor":"4.2.b"}`,
		`{"status":"ADMITTED","admissionToken":"adm"}`,
	}
	var mu sync.Mutex
	var sent []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, r.URL.Query().Get("cursor"))
		fmt.Fprint(w, answers[min(len(sent), len(answers))-1])
	}))
	defer srv.Close()
	l := newLoad(srv.URL, time.Second, time.Minute)
	p := &person{state: state{item: "i", user: "u", statusURL: "/api/v1/items/i/registrations/tok"}}
	if got := l.poll(context.Background(), p, time.Now().Add(10*time.Second)); got != "adm" {
		t.Fatalf("poll returned %q, want the admission token", got)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"", "5.1.a", "5.1.a", "4.2.b"}
	if fmt.Sprint(sent) != fmt.Sprint(want) {
		t.Fatalf("cursors sent %q, want %q", sent, want)
	}
	if s := p.snapshot(); s.lastPos != 4 || len(s.regressed) != 0 {
		t.Fatalf("told %d (regressed %v), want 4 and none", s.lastPos, s.regressed)
	}
}
