package chaos

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// person is one visitor of the load: registers, waits for admission (over SSE
// with reconnects, as a browser's EventSource does, or by polling status),
// holds the admission a moment, then verifies and completes it.
type person struct {
	mu sync.Mutex
	state
}

// state is what is known of a person, copied out for the checks.
type state struct {
	item, user string
	sse        bool

	t0         time.Time // first register attempt
	got202     time.Time
	statusURL  string
	eventsURL  string
	inLine     time.Time // first WAITING / position / admitted seen
	admitted   time.Time
	via        string // sse, poll
	completed  bool
	outcome    string // what ended it: completed, or the failure
	reconnects int
	lastPos    int64    // the last position the server told this person
	regressed  []string // each time it told a larger one

	opens []time.Time // SSE: each stream answered 200
	drops []time.Time // SSE: each open stream that ended with no final event
}

// told records a position the server told p (0: none in that answer): it
// must never be larger than the last one told.
func (p *person) told(pos int64, via string) {
	if pos <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastPos > 0 && pos > p.lastPos {
		p.regressed = append(p.regressed, fmt.Sprintf("%s %s told position %d after %d (%s)", p.item, p.user, pos, p.lastPos, via))
	}
	p.lastPos = pos
}

func (p *person) set(f func(s *state)) {
	p.mu.Lock()
	f(&p.state)
	p.mu.Unlock()
}

func (p *person) snapshot() state {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// load runs people against the front door.
type load struct {
	base    string
	cl      *http.Client
	use     time.Duration // how long a person holds the admission
	patient time.Duration // how long a person waits for admission at most

	mu      sync.Mutex
	people  []*person
	refused atomic.Int64 // people who never got a 202 (every try refused)
	// stallReaders, while set, stops every SSE listener reading its stream
	// (the nemesis's slow readers).
	stallReaders atomic.Bool
	wg           sync.WaitGroup
}

func newLoad(base string, use, patient time.Duration) *load {
	tr := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: 30 * time.Second}
	return &load{base: base, cl: &http.Client{Transport: tr}, use: use, patient: patient}
}

// all returns a copy of every person so far.
func (l *load) all() []state {
	l.mu.Lock()
	ps := append([]*person(nil), l.people...)
	l.mu.Unlock()
	out := make([]state, len(ps))
	for i, p := range ps {
		out[i] = p.snapshot()
	}
	return out
}

// run starts a person every 1/rate seconds, round robin over items, every
// sseEvery-th listening on SSE, until spawn ends or max people have come.
// Each person's journey runs under ctx, so a stopped spawn lets the people
// already there finish.
func (l *load) run(spawn, ctx context.Context, items []string, rate float64, sseEvery, max int, runID string) {
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	for n := 0; n < max; n++ {
		select {
		case <-spawn.Done():
			return
		case <-t.C:
		}
		l.join(ctx, items[n%len(items)], fmt.Sprintf("%s-u%06d", runID, n), sseEvery > 0 && n%sseEvery == 0)
	}
}

// join starts one person's journey under ctx; the person is in the ledger
// like every other.
func (l *load) join(ctx context.Context, item, user string, sse bool) {
	p := &person{state: state{item: item, user: user, sse: sse}}
	l.mu.Lock()
	l.people = append(l.people, p)
	l.mu.Unlock()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.journey(ctx, p)
	}()
}

// regressions counts the people told a position larger than one they were
// told before, from each one's own history.
func (l *load) regressions(v *verdict) {
	l.mu.Lock()
	ps := append([]*person(nil), l.people...)
	l.mu.Unlock()
	for _, p := range ps {
		p.mu.Lock()
		if len(p.regressed) > 0 {
			v.Regressed++
			if v.Regressed <= 3 { // the notes are few: leave room for the others
				v.note("%s", p.regressed[0])
			}
		}
		p.mu.Unlock()
	}
}

// requestTimeout bounds one request of a person (not a stream): a request
// stuck behind a link that never answers is given up and tried again, as a
// browser's fetch with a timeout would.
const requestTimeout = 10 * time.Second

// wait waits for every person's journey to end (they end by themselves:
// admitted and completed, or out of patience).
func (l *load) wait() { l.wg.Wait() }

func (l *load) journey(ctx context.Context, p *person) {
	deadline := time.Now().Add(l.patient)
	if !l.register(ctx, p, deadline) {
		return
	}
	var token string
	if p.sse {
		token = l.listen(ctx, p, deadline)
	} else {
		token = l.poll(ctx, p, deadline)
	}
	if token == "" {
		return
	}
	if !sleepCtx(ctx, l.use) {
		return
	}
	for _, kind := range []string{"verify", "complete"} {
		if !l.admissionCall(ctx, p, kind, token, deadline) {
			return
		}
	}
	p.set(func(p *state) { p.completed, p.outcome = true, "completed" })
}

// register retries a refused or failed registration with the same user and
// requestId, as a client whose answer was lost would: the api answers a
// retry with the first try's place (else the first try, written but never
// answered, left a place nobody holds, admitted in its turn and holding an
// admission for the whole session).
func (l *load) register(ctx context.Context, p *person, deadline time.Time) bool {
	p.set(func(p *state) { p.t0 = time.Now() })
	body := []byte(`{"userId":"` + p.user + `","requestId":"` + rand.Text() + `"}`)
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		req, _ := http.NewRequestWithContext(rctx, http.MethodPost, l.base+"/api/v1/items/"+p.item+"/registrations", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := l.cl.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			cancel()
			if resp.StatusCode == http.StatusAccepted {
				var r struct{ Token, TokenID, StatusURL, EventsURL string }
				if err := json.Unmarshal(b, &r); err == nil && r.Token != "" {
					p.set(func(p *state) {
						p.got202, p.statusURL, p.eventsURL = time.Now(), r.StatusURL, r.EventsURL
					})
					return true
				}
			}
			if resp.StatusCode >= 400 && resp.StatusCode < 500 {
				p.set(func(p *state) { p.outcome = fmt.Sprintf("register refused: %d %s", resp.StatusCode, b) })
				l.refused.Add(1)
				return false
			}
		}
		cancel()
		if !sleepCtx(ctx, 300*time.Millisecond) {
			return false
		}
	}
	p.set(func(p *state) { p.outcome = "register: no 202 before the deadline" })
	l.refused.Add(1)
	return false
}

type statusBody struct {
	Status         string `json:"status"`
	AdmissionToken string `json:"admissionToken"`
	Position       int64  `json:"position"`
	Cursor         string `json:"cursor"`
}

// status reads the registration's status: the HTTP code and the body.
func (l *load) status(ctx context.Context, path string) (int, statusBody, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, l.base+path, nil)
	resp, err := l.cl.Do(req)
	if err != nil {
		return 0, statusBody{}, err
	}
	defer resp.Body.Close()
	var b statusBody
	err = json.NewDecoder(resp.Body).Decode(&b)
	return resp.StatusCode, b, err
}

// poll reads the status until admitted, as the waiting page does: it sends
// back the last WAITING answer's cursor, so whichever api answers never
// tells a larger position than that answer.
func (l *load) poll(ctx context.Context, p *person, deadline time.Time) string {
	cursor := ""
	for time.Now().Before(deadline) {
		u := p.statusURL
		if cursor != "" {
			u += "?cursor=" + url.QueryEscape(cursor)
		}
		code, b, err := l.status(ctx, u)
		if err == nil && code == http.StatusOK {
			switch b.Status {
			case "WAITING":
				if b.Cursor != "" {
					cursor = b.Cursor
				}
				p.told(b.Position, "status")
				p.set(func(p *state) {
					if p.inLine.IsZero() {
						p.inLine = time.Now()
					}
				})
			case "ADMITTED":
				now := time.Now()
				p.set(func(p *state) {
					if p.inLine.IsZero() {
						p.inLine = now
					}
					p.admitted, p.via = now, "poll"
				})
				return b.AdmissionToken
			case "PENDING":
			default:
				p.set(func(p *state) { p.outcome = "status " + b.Status })
				return ""
			}
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return ""
		}
	}
	p.set(func(p *state) { p.outcome = "not admitted before the deadline (poll)" })
	return ""
}

// listen follows the event stream until admitted, reconnecting with
// Last-Event-ID after a dropped stream or a refusal (503 while the view is
// rebuilt, a notifier that died), as EventSource does.
func (l *load) listen(ctx context.Context, p *person, deadline time.Time) string {
	lastID := ""
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		if attempt > 0 {
			p.set(func(p *state) { p.reconnects++ })
			if !sleepCtx(ctx, 500*time.Millisecond) {
				return ""
			}
		}
		sctx, cancel := context.WithDeadline(ctx, deadline)
		tok, id, final := l.stream(sctx, p, lastID)
		cancel()
		if id != "" {
			lastID = id
		}
		if tok != "" || final {
			return tok
		}
	}
	p.set(func(p *state) { p.outcome = "not admitted before the deadline (sse)" })
	return ""
}

// stream reads one connection of the event stream. It returns the admission
// token once admitted, the last event id, and whether the stream ended for
// good (a terminal event other than admitted).
func (l *load) stream(ctx context.Context, p *person, lastID string) (token, id string, final bool) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, l.base+p.eventsURL, nil)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := l.cl.Do(req)
	if err != nil {
		return "", "", false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", "", false
	}
	p.set(func(p *state) { p.opens = append(p.opens, time.Now()) })
	defer func() {
		if !final {
			p.set(func(p *state) { p.drops = append(p.drops, time.Now()) })
		}
	}()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var event, data string
	for sc.Scan() {
		for l.stallReaders.Load() && sleepCtx(ctx, 100*time.Millisecond) {
		}
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id:"):
			id = strings.TrimSpace(line[3:])
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			data = strings.TrimSpace(line[5:])
		case line == "":
			switch event {
			case "position":
				var d struct{ Position int64 }
				if json.Unmarshal([]byte(data), &d) == nil {
					p.told(d.Position, "sse")
				}
				p.set(func(p *state) {
					if p.inLine.IsZero() {
						p.inLine = time.Now()
					}
				})
			case "admitted":
				var d struct{ AdmissionToken string }
				if json.Unmarshal([]byte(data), &d) == nil && d.AdmissionToken != "" {
					now := time.Now()
					p.set(func(p *state) {
						if p.inLine.IsZero() {
							p.inLine = now
						}
						p.admitted, p.via = now, "sse"
					})
					return d.AdmissionToken, id, true
				}
			case "sold_out", "closed", "expired", "left", "completed", "rejected":
				p.set(func(p *state) { p.outcome = "event " + event })
				return "", id, true
			}
			event, data = "", ""
		}
	}
	return "", id, false
}

// admissionCall verifies or completes the admission as the order service
// would, retrying while the answer is not yet known (503, a dead api).
func (l *load) admissionCall(ctx context.Context, p *person, kind, token string, deadline time.Time) bool {
	body, _ := json.Marshal(map[string]string{"token": token, "itemId": p.item})
	unanswered := false // a try went unanswered: it may have been done
	for time.Now().Before(deadline.Add(30 * time.Second)) {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		req, _ := http.NewRequestWithContext(rctx, http.MethodPost, l.base+"/api/v1/admissions/"+kind, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := l.cl.Do(req)
		var b []byte
		if err == nil {
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		cancel()
		if err == nil {
			switch {
			case resp.StatusCode == http.StatusOK:
				return true
			case resp.StatusCode == http.StatusGone && kind == "complete" && unanswered &&
				l.knownStatus(ctx, p.statusURL, requestTimeout) == "COMPLETED":
				// An earlier try completed it and its answer was lost on
				// the way back (a reset or held link): done, as an order
				// service checking the status would conclude.
				return true
			case resp.StatusCode < 500:
				p.set(func(p *state) { p.outcome = fmt.Sprintf("%s: %d %s", kind, resp.StatusCode, b) })
				return false
			}
		}
		unanswered = true
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return false
		}
	}
	p.set(func(p *state) { p.outcome = kind + ": no answer before the deadline" })
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
