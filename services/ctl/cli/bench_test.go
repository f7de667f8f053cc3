package cli

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeAPI mimics the registration API: POST answers 202 with a token, GET
// answers PENDING for the first pending polls of a token and WAITING with a
// position after that.
type fakeAPI struct {
	failEvery   int           // every failEvery-th POST answers 503
	pending     int           // GETs of a token answered PENDING before WAITING
	expireAfter int           // GETs of a token after which it answers EXPIRED; 0: never
	postDelay   time.Duration // how long a POST takes

	posts  atomic.Int64
	mu     sync.Mutex
	users  map[string]bool
	tokens map[string]*fakeReg
}

type fakeReg struct {
	item  string
	pos   int64
	polls int
}

func (f *fakeAPI) start(t *testing.T) string {
	t.Helper()
	f.users, f.tokens = map[string]bool{}, map[string]*fakeReg{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/items/{item}/registrations", f.register)
	mux.HandleFunc("GET /api/v1/items/{item}/registrations/{token}", f.status)
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s.URL
}

func (f *fakeAPI) register(w http.ResponseWriter, r *http.Request) {
	var body struct{ UserID string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.UserID == "" {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	time.Sleep(f.postDelay)
	if n := f.posts.Add(1); f.failEvery > 0 && n%int64(f.failEvery) == 0 {
		http.Error(w, `{"code":"UNAVAILABLE"}`, http.StatusServiceUnavailable)
		return
	}
	item := r.PathValue("item")
	f.mu.Lock()
	dup := f.users[body.UserID]
	f.users[body.UserID] = true
	tok := "tok-" + body.UserID
	f.tokens[tok] = &fakeReg{item: item, pos: int64(len(f.tokens) + 1)}
	f.mu.Unlock()
	if dup {
		http.Error(w, "duplicate user "+body.UserID, http.StatusConflict)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(map[string]string{"status": "QUEUED", "itemId": item, "userId": body.UserID, "tokenId": "id", "token": tok})
}

func (f *fakeAPI) status(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	reg, ok := f.tokens[r.PathValue("token")]
	var polls int
	if ok {
		reg.polls++
		polls = reg.polls
	}
	f.mu.Unlock()
	if !ok || reg.item != r.PathValue("item") {
		http.Error(w, `{"code":"TOKEN_INVALID"}`, http.StatusUnauthorized)
		return
	}
	ans := map[string]any{"status": "WAITING", "position": reg.pos, "waitingTotal": 1000}
	switch {
	case polls <= f.pending:
		ans = map[string]any{"status": "PENDING"}
	case f.expireAfter > 0 && polls > f.expireAfter:
		ans = map[string]any{"status": "EXPIRED"}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ans)
}

func TestBenchRegisterCountsAndVisibility(t *testing.T) {
	f := &fakeAPI{pending: 2}
	url := f.start(t)
	code, out, stderr := run(t, "-o", "json", "bench", "register", "--url", url, "--items", "concert-2026,sneaker-drop",
		"--n", "300", "--concurrency", "8", "--visible-sample", "10")
	require.Equal(t, ExitOK, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	var rep struct {
		Total, Accepted, Errors int
		ErrorsByStatus          map[string]int
		Stopped                 string
		PerSecond               float64 `json:"registrationsPerSecond"`
		Latency                 struct{ Count int }
		Visible                 struct {
			Sampled, Visible, NotVisible int
			Latency                      struct {
				Count int
				P50   float64 `json:"p50Ms"`
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, 300, rep.Total)
	assert.Equal(t, 300, rep.Accepted)
	assert.Equal(t, 0, rep.Errors)
	assert.Empty(t, rep.ErrorsByStatus)
	assert.Equal(t, stoppedN, rep.Stopped)
	assert.Equal(t, 300, rep.Latency.Count)
	assert.Positive(t, rep.PerSecond)
	assert.Equal(t, 30, rep.Visible.Sampled)
	assert.Equal(t, 30, rep.Visible.Visible)
	assert.Equal(t, 0, rep.Visible.NotVisible)
	assert.Equal(t, 30, rep.Visible.Latency.Count)
	assert.Positive(t, rep.Visible.Latency.P50)

	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Len(t, f.users, 300, "every registration has its own userId")
	var polled int
	for _, r := range f.tokens {
		if r.polls > 0 {
			polled++
			assert.Equal(t, f.pending+1, r.polls, "polled until WAITING, then no more")
		}
	}
	assert.Equal(t, 30, polled)
}

func TestBenchRegisterErrorsByStatusExit1(t *testing.T) {
	f := &fakeAPI{failEvery: 10}
	url := f.start(t)
	code, out, stderr := run(t, "bench", "register", "--url", url, "--n", "200", "--concurrency", "4", "--visible-sample", "0")
	require.Equal(t, ExitFailure, code, "10%% errors is above the 1%% limit; stdout:\n%s\nstderr:\n%s", out, stderr)
	assert.Regexp(t, `(?m)^stopped\s+n reached after `, out)
	assert.Regexp(t, `(?m)^total\s+200$`, out)
	assert.Regexp(t, `(?m)^accepted \(202\)\s+180$`, out)
	assert.Regexp(t, `(?m)^errors\s+20 \(10\.00%\)  503=20$`, out)
	assert.Regexp(t, `(?m)^throughput\s+[0-9.]+ registrations/s$`, out)
	assert.Regexp(t, `(?m)^latency 202\s+p50=\S+ms p90=\S+ms p99=\S+ms max=\S+ms$`, out)
	assert.Contains(t, stderr, "20 of 200 registrations failed (10.00%), above --max-error-rate 1.00%")

	// The same run passes when the limit allows it.
	code, _, stderr = run(t, "bench", "register", "--url", url, "--n", "200", "--concurrency", "4", "--max-error-rate", "0.2")
	assert.Equal(t, ExitOK, code, stderr)
}

func TestBenchRegisterStopsAtDuration(t *testing.T) {
	f := &fakeAPI{postDelay: 5 * time.Millisecond}
	url := f.start(t)
	start := time.Now()
	code, out, stderr := run(t, "bench", "register", "--url", url, "--n", "1000000", "--concurrency", "4", "--duration", "200ms")
	require.Equal(t, ExitOK, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Regexp(t, `(?m)^stopped\s+duration cap after \d+\.\d+s$`, out)
	f.mu.Lock()
	assert.Less(t, len(f.users), 1000000)
	f.mu.Unlock()
	assert.Regexp(t, `(?m)^errors\s+0 \(0\.00%\)$`, out)
}

func TestBenchRegisterNoServerExit1(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	code, out, _ := run(t, "bench", "register", "--url", "http://"+addr, "--n", "10", "--concurrency", "2")
	assert.Equal(t, ExitFailure, code)
	assert.Regexp(t, `(?m)^errors\s+10 \(100\.00%\)  transport=10$`, out)
}

func TestBenchStatusReadsEveryToken(t *testing.T) {
	f := &fakeAPI{pending: 1}
	url := f.start(t)
	code, out, stderr := run(t, "bench", "status", "--url", url, "--tokens", "20", "--n", "500", "--concurrency", "8")
	require.Equal(t, ExitOK, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	assert.Regexp(t, `(?m)^setup\s+20 registered and WAITING in `, out)
	assert.Regexp(t, `(?m)^reads\s+500$`, out)
	assert.Regexp(t, `(?m)^ok\s+500 `, out)
	assert.Regexp(t, `(?m)^errors\s+0 \(0\.00%\)$`, out)
	assert.Regexp(t, `(?m)^throughput\s+[0-9.]+ reads/s$`, out)

	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.tokens, 20)
	for tok, r := range f.tokens {
		// 1 PENDING + 1 WAITING while waiting, then 500/20 reads.
		assert.Equal(t, 2+25, r.polls, tok)
	}
}

func TestBenchStatusCountsWrongAnswers(t *testing.T) {
	// Each token answers WAITING to its first 11 GETs (1 in setup, 10 reads)
	// and EXPIRED to its other 15 reads.
	f := &fakeAPI{expireAfter: 11}
	url := f.start(t)
	code, out, stderr := run(t, "-o", "json", "bench", "status", "--url", url, "--tokens", "20", "--n", "500", "--concurrency", "8")
	require.Equal(t, ExitFailure, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	var rep struct {
		Reads, OK, Errors int
		ErrorsByKind      map[string]int
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, 500, rep.Reads)
	assert.Equal(t, 200, rep.OK)
	assert.Equal(t, 300, rep.Errors)
	assert.Equal(t, map[string]int{"mismatch-EXPIRED": 300}, rep.ErrorsByKind)
	assert.Contains(t, stderr, "300 of 500 status reads failed")
}

func TestBenchStatusSetupFailsWhenNeverWaiting(t *testing.T) {
	f := &fakeAPI{pending: 1 << 30}
	url := f.start(t)
	code, _, stderr := run(t, "bench", "status", "--url", url, "--tokens", "5", "--n", "10", "--visible-timeout", "100ms")
	assert.Equal(t, ExitFailure, code)
	assert.Contains(t, stderr, "setup: 5 of 5 registrations not WAITING within 100ms")
}
