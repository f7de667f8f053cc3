package sse

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/grafana/sobek"
	"go.k6.io/k6/js/modulestest"
	"go.k6.io/k6/lib"
	"go.k6.io/k6/metrics"
)

// vu is one VU with k6/x/sse bound to the global "sse", past its init context.
type vu struct {
	rt      *modulestest.Runtime
	samples chan metrics.SampleContainer
}

func newVU(t *testing.T) *vu {
	t.Helper()
	rt := modulestest.NewRuntime(t)
	mi := New().NewModuleInstance(rt.VU)
	if err := rt.VU.Runtime().Set("sse", mi.Exports().Named); err != nil {
		t.Fatal(err)
	}
	samples := make(chan metrics.SampleContainer, 10000)
	reg := rt.VU.InitEnvField.Registry
	rt.MoveToVUContext(&lib.State{
		Options:        lib.Options{SystemTags: &metrics.DefaultSystemTagSet},
		BuiltinMetrics: rt.BuiltinMetrics,
		Transport:      &http.Transport{},
		Samples:        samples,
		Tags:           lib.NewVUStateTags(reg.RootTagSet().With("scenario", "test")),
	})
	return &vu{rt: rt, samples: samples}
}

func (v *vu) run(t *testing.T, js string) sobek.Value {
	t.Helper()
	val, err := v.rt.VU.Runtime().RunString(js)
	if err != nil {
		t.Fatalf("%s\n%v", js, err)
	}
	return val
}

// sums adds the samples pushed so far per metric name (and name{event} for tagged counters).
func (v *vu) sums() map[string]float64 {
	out := map[string]float64{}
	for {
		select {
		case c := <-v.samples:
			for _, s := range c.GetSamples() {
				out[s.Metric.Name] += s.Value
				if ev, ok := s.Tags.Get("event"); ok {
					out[s.Metric.Name+"{"+ev+"}"] += s.Value
				}
				if it, ok := s.Tags.Get("item"); ok {
					out[s.Metric.Name+"{item:"+it+"}"] += s.Value
				}
			}
		default:
			return out
		}
	}
}

// waitroomStream answers like the notifier: positions, a heartbeat, then admitted.
func waitroomStream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, `{"error":{"code":"TOKEN_INVALID"}}`, http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Accept") != "text/event-stream" {
			http.Error(w, "accept", http.StatusNotAcceptable)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		fmt.Fprint(w, "retry: 3000\n\n")
		start := 3
		if r.Header.Get("Last-Event-ID") == "2" {
			start = 1
		}
		for i, pos := 1, start; pos >= 1; i, pos = i+1, pos-1 {
			fmt.Fprintf(w, "event: position\nid: %d\ndata: {\"position\":%d,\n", i, pos)
			fmt.Fprintf(w, "data: \"waitingTotal\":3}\n\n")
			fmt.Fprint(w, ": heartbeat\n\n")
			fl.Flush()
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Fprint(w, "event: admitted\nid: 9\ndata: {\"admissionToken\":\"adm\"}\n\n")
		fl.Flush()
		<-r.Context().Done() // keep the stream open: the client must stop by itself
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestListenUntilAdmitted(t *testing.T) {
	srv := waitroomStream(t)
	v := newVU(t)
	v.run(t, fmt.Sprintf(`
		const t0 = Date.now();
		var res = sse.listen(%q, {headers: {Authorization: "Bearer tok"}, timeout: "5s", until: ["admitted", "closed"], tags: {item: "concert"}});
		if (res.status !== 200) throw new Error("status " + res.status + " " + res.error);
		if (res.reason !== "until") throw new Error("reason " + res.reason);
		if (res.error !== null) throw new Error("error " + res.error);
		if (res.events.length !== 4) throw new Error("events " + JSON.stringify(res.events));
		const names = res.events.map(e => e.name).join(",");
		if (names !== "position,position,position,admitted") throw new Error(names);
		const p = JSON.parse(res.events[0].data);
		if (p.position !== 3 || p.waitingTotal !== 3) throw new Error(res.events[0].data);
		if (res.events[2].id !== "3") throw new Error("id " + res.events[2].id);
		if (JSON.parse(res.last.data).admissionToken !== "adm") throw new Error(res.last.data);
		if (res.lastEventId !== "9" || res.retry !== 3000 || res.comments !== 3) throw new Error(JSON.stringify(res));
		if (!(res.events[0].at >= t0 && res.events[3].at <= Date.now() + 1)) throw new Error("at " + res.events[0].at);
		if (!(res.firstEvent > 0 && res.firstEvent <= res.duration && res.events[3].elapsed >= 30)) throw new Error(JSON.stringify(res));
	`, srv.URL))
	s := v.sums()
	want := map[string]float64{"sse_event_count": 4, "sse_event_count{position}": 3, "sse_event_count{admitted}": 1,
		"sse_listens": 1, "sse_failed": 0, "sse_event_count{item:concert}": 4}
	for k, w := range want {
		if s[k] != w {
			t.Errorf("%s = %v, want %v (all: %v)", k, s[k], w, s)
		}
	}
	if s["sse_time_to_first_event"] <= 0 || s["sse_connecting"] <= 0 {
		t.Errorf("timings missing: %v", s)
	}
}

func TestListenLastEventID(t *testing.T) {
	srv := waitroomStream(t)
	v := newVU(t)
	v.run(t, fmt.Sprintf(`
		var res = sse.listen(%q, {headers: {Authorization: "Bearer tok"}, lastEventId: "2", until: ["admitted"], timeout: 5000});
		if (res.events.length !== 2) throw new Error(JSON.stringify(res));
		// No event yet: the id given is still the last one, for the next resume.
		var r2 = sse.listen(%q, {headers: {Authorization: "Bearer tok"}, lastEventId: "2", maxEvents: 1, timeout: 5000});
		if (r2.lastEventId !== "1" || r2.events[0].id !== "1") throw new Error(JSON.stringify(r2));
		var r3 = sse.listen(%q, {lastEventId: "5"});
		if (r3.lastEventId !== "5" || r3.status !== 401 || r3.connecting === null) throw new Error(JSON.stringify(r3));
	`, srv.URL, srv.URL, srv.URL))
}

func TestListenOnEvent(t *testing.T) {
	srv := waitroomStream(t)
	v := newVU(t)
	v.run(t, fmt.Sprintf(`
		var seen = [];
		var res = sse.listen(%q, {headers: {Authorization: "Bearer tok"}, onEvent: function(e) {
			seen.push(JSON.parse(e.data).position);
			return seen.length === 2;
		}});
		if (res.reason !== "stopped" || seen.join() !== "3,2" || res.events.length !== 2) throw new Error(res.reason + " " + seen);
	`, srv.URL))

	_, err := v.rt.VU.Runtime().RunString(fmt.Sprintf(`
		sse.listen(%q, {headers: {Authorization: "Bearer tok"}, onEvent: function(e) { throw new Error("from callback"); }});
	`, srv.URL))
	if err == nil || !strings.Contains(err.Error(), "from callback") {
		t.Fatalf("err = %v, want the callback's exception", err)
	}
}

func TestListenMaxEvents(t *testing.T) {
	srv := waitroomStream(t)
	v := newVU(t)
	v.run(t, fmt.Sprintf(`
		var res = sse.listen(%q, {headers: {Authorization: "Bearer tok"}, maxEvents: 1});
		if (res.reason !== "max_events" || res.events.length !== 1) throw new Error(JSON.stringify(res));
	`, srv.URL))
}

func TestListenTimeoutKeepsEvents(t *testing.T) {
	srv := waitroomStream(t)
	v := newVU(t)
	start := time.Now()
	v.run(t, fmt.Sprintf(`
		var res = sse.listen(%q, {headers: {Authorization: "Bearer tok"}, timeout: 300, until: ["never"]});
		if (res.reason !== "timeout" || res.status !== 200 || res.events.length !== 4) throw new Error(JSON.stringify(res));
		if (res.error === null) throw new Error("want the read error");
	`, srv.URL))
	if d := time.Since(start); d < 300*time.Millisecond || d > 3*time.Second {
		t.Fatalf("listen took %v, want about the 300ms timeout", d)
	}
	if s := v.sums(); s["sse_failed"] != 0 {
		t.Fatalf("a timeout is not a failure: %v", s)
	}
}

func TestListenEOF(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		fmt.Fprint(w, "event: closed\ndata: {}\n\ndata: unfinished\n")
	}))
	defer srv.Close()
	v := newVU(t)
	v.run(t, fmt.Sprintf(`
		var res = sse.listen(%q);
		if (res.reason !== "eof" || res.events.length !== 1 || res.events[0].name !== "closed") throw new Error(JSON.stringify(res));
	`, srv.URL))
}

func TestListenFailures(t *testing.T) {
	srv := waitroomStream(t)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{}`)
	}))
	defer plain.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/events"
	_ = ln.Close()

	v := newVU(t)
	v.run(t, fmt.Sprintf(`
		var r1 = sse.listen(%q);
		if (r1.status !== 401 || r1.reason !== "status" || r1.body.indexOf("TOKEN_INVALID") < 0 || r1.error !== "unexpected status 401") throw new Error(JSON.stringify(r1));
		var r2 = sse.listen(%q);
		if (r2.status !== 200 || r2.reason !== "content_type") throw new Error(JSON.stringify(r2));
		var r3 = sse.listen(%q, {timeout: "2s"});
		if (r3.status !== 0 || r3.reason !== "error" || r3.error.indexOf("refused") < 0 || r3.connecting !== null) throw new Error(JSON.stringify(r3));
		var r4 = sse.listen("::not a url");
		if (r4.reason !== "error") throw new Error(JSON.stringify(r4));
	`, srv.URL, plain.URL, refused))
	if s := v.sums(); s["sse_failed"] != 4 || s["sse_listens"] != 4 {
		t.Fatalf("sums %v", s)
	}
}

func TestListenBadOptions(t *testing.T) {
	v := newVU(t)
	for _, js := range []string{
		`sse.listen("http://127.0.0.1:1", {timeout: "soon"})`,
		`sse.listen("http://127.0.0.1:1", {timeout: -1})`,
		`sse.listen("http://127.0.0.1:1", {until: 5})`,
		`sse.listen("http://127.0.0.1:1", {maxEvents: 0})`,
		`sse.listen("http://127.0.0.1:1", {onEvent: "x"})`,
		`sse.listen("http://127.0.0.1:1", {tiemout: "1s"})`,
	} {
		if _, err := v.rt.VU.Runtime().RunString(js); err == nil {
			t.Errorf("%s: want an exception", js)
		}
	}
}

func TestListenInInitContext(t *testing.T) {
	rt := modulestest.NewRuntime(t)
	mi := New().NewModuleInstance(rt.VU)
	if err := rt.VU.Runtime().Set("sse", mi.Exports().Named); err != nil {
		t.Fatal(err)
	}
	_, err := rt.VU.Runtime().RunString(`sse.listen("http://127.0.0.1:1")`)
	if err == nil || !strings.Contains(err.Error(), "init context") {
		t.Fatalf("err = %v", err)
	}
}

func TestListenInterruptedWithTheVU(t *testing.T) {
	srv := waitroomStream(t)
	v := newVU(t)
	go func() {
		time.Sleep(200 * time.Millisecond)
		v.rt.CancelContext()
	}()
	start := time.Now()
	v.run(t, fmt.Sprintf(`
		var res = sse.listen(%q, {headers: {Authorization: "Bearer tok"}, timeout: "30s", until: ["never"]});
		if (res.reason !== "interrupted") throw new Error(JSON.stringify(res));
	`, srv.URL))
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("listen outlived its VU by %v", d)
	}
}
