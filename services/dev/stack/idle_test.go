package stack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/redisview/linesnap"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/services/dev/stack"
	"go.uber.org/zap/zaptest"
)

// startWith is start with the stack's options changed by f.
func (e *env) startWith(f func(*stack.Options)) {
	e.t.Helper()
	o := stack.Options{Brokers: e.brokers, Redis: &e.rcfg, TokenKey: testKey,
		AdminToken: adminToken, Tick: 100 * time.Millisecond, Log: zaptest.NewLogger(e.t).Named("stack")}
	f(&o)
	s, err := stack.Start(context.Background(), o)
	require.NoError(e.t, err)
	e.stack = s
	e.t.Cleanup(func() {
		e.http.CloseIdleConnections()
		require.NoError(e.t, s.Stop())
	})
}

// poll reads a status without failing the test (for goroutines).
func (e *env) poll(itemID, tok string) (httpapi.StatusResponse, int, error) {
	var s httpapi.StatusResponse
	resp, err := e.http.Get(e.stack.APIURL + "/api/v1/items/" + itemID + "/registrations/" + tok)
	if err != nil {
		return s, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return s, resp.StatusCode, err
	}
	return s, resp.StatusCode, json.Unmarshal(b, &s)
}

// Of 100 waiters of an item with a 3 s idleTimeout, the 30 that stop polling
// lose their places (ABANDONED, counted in the stats and the consumer's
// metric); the 70 that follow pollAfterMs, some of them after a pause shorter
// than the timeout, all keep theirs and move up by exactly the places
// released ahead of them. A released user who registers again goes to the
// back. A rebuild of the lost view then puts back the same line.
func TestIdlePlacesAreReleased(t *testing.T) {
	const n, idleSeconds = 100, 3
	it := item("idle") // paused (rate 0): only releases move the line
	it.IdleTimeoutSeconds = idleSeconds
	e := newEnv(t, it)
	e.startWith(func(o *stack.Options) { o.SeenFlush = 500 * time.Millisecond })
	ctx := context.Background()
	line := queue.New(e.rdb)

	regs := make([]httpapi.RegisterResponse, n)
	qs := make([]token.Queue, n)
	for i := range regs {
		regs[i], qs[i] = e.register("idle", fmt.Sprintf("u%03d", i))
	}
	order := byOffset(t, slices.Clone(qs))
	require.Equal(t, order, e.waitLine("idle", n))
	posOf := map[string]int64{} // tokenId -> 1-based position before
	for i, tok := range order {
		posOf[tok] = int64(i + 1)
	}
	idx := map[string]int{} // tokenId -> index in regs
	for i, q := range qs {
		idx[q.TokenID] = i
	}
	stops := func(i int) bool { return i%10 == 1 || i%10 == 4 || i%10 == 7 } // 30 of 100
	for i, r := range regs {
		st := e.status("idle", r.Token) // everyone polls once
		require.Equal(t, "WAITING", st.Status)
		require.Equal(t, posOf[qs[i].TokenID], st.Position)
		if !stops(i) {
			require.Positive(t, st.PollAfterMs)
			require.Less(t, st.PollAfterMs, int64(idleSeconds*1000/3), "pollAfterMs below a third of the idle timeout")
		}
	}

	// The 70 poll as pollAfterMs says; every fifth of them pauses once for
	// less than the timeout. Any answer but WAITING is a lost place.
	var mu sync.Mutex
	var lost []string
	var polls int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, r := range regs {
		if stops(i) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			paused := i%5 != 0
			began := time.Now()
			for {
				st, code, err := e.poll("idle", r.Token)
				wait := 500 * time.Millisecond
				switch {
				case err != nil || code == http.StatusServiceUnavailable: // the view rebuilding: try again
				case code != http.StatusOK || st.Status != "WAITING":
					mu.Lock()
					lost = append(lost, fmt.Sprintf("u%03d: %d %s", i, code, st.Status))
					mu.Unlock()
				default:
					mu.Lock()
					polls++
					mu.Unlock()
					wait = time.Duration(st.PollAfterMs) * time.Millisecond
				}
				if !paused && time.Since(began) > 2*time.Second {
					paused, wait = true, 1500*time.Millisecond // back within the timeout
				}
				select {
				case <-stop:
					return
				case <-time.After(wait):
				}
			}
		}()
	}
	stopPolling := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopPolling)

	require.Eventually(t, func() bool {
		got, err := line.AbandonedCount(ctx, "idle")
		require.NoError(t, err)
		require.LessOrEqual(t, got, int64(30), "only the 30 idle places are released")
		return got == 30
	}, 60*time.Second, 50*time.Millisecond, "the 30 idle places released")
	// Two more timeouts with the 70 polling: none of them is released.
	time.Sleep(2 * (idleSeconds*time.Second + time.Second))
	got, err := line.AbandonedCount(ctx, "idle")
	require.NoError(t, err)
	require.EqualValues(t, 30, got)

	var want []string // the line without the 30, in order
	for _, tok := range order {
		if !stops(idx[tok]) {
			want = append(want, tok)
		}
	}
	now, err := line.Waiting(ctx, "idle", 0)
	require.NoError(t, err)
	require.Equal(t, want, now, "the 70 keep their order")
	for i, r := range regs {
		st := e.status("idle", r.Token)
		tok := qs[i].TokenID
		if stops(i) {
			assert.Equal(t, "ABANDONED", st.Status, "u%03d stopped polling", i)
			assert.Zero(t, st.PollAfterMs, "a final answer")
			continue
		}
		ahead := int64(0)
		for _, o := range order[:posOf[tok]-1] {
			if stops(idx[o]) {
				ahead++
			}
		}
		require.Equal(t, "WAITING", st.Status, "u%03d", i)
		assert.Equal(t, posOf[tok]-ahead, st.Position, "u%03d moves up by the %d released ahead", i, ahead)
		assert.EqualValues(t, 70, st.WaitingTotal)
	}
	body := e.get(e.stack.ConsumerURL + "/metrics")
	assert.Contains(t, body, "waitroom_consumer_abandoned_total 30")

	// The view is lost and rebuilt from the record: the same line, the same
	// count, the released places still ABANDONED; nobody else released.
	before, err := linesnap.Take(ctx, e.rdb, "idle", time.Time{})
	require.NoError(t, err)
	e.flushAll()
	require.Eventually(t, func() bool {
		after, err := linesnap.Take(ctx, e.rdb, "idle", time.Time{})
		if err != nil || after.Seq != before.Seq || !slices.Equal(after.Entries, before.Entries) {
			return false
		}
		n, err := line.AbandonedCount(ctx, "idle")
		return err == nil && n == 30
	}, 60*time.Second, 100*time.Millisecond, "the rebuilt line equals the live one")
	time.Sleep(idleSeconds*time.Second + time.Second) // the rebuild's grace runs out: the 70 still poll
	got, err = line.AbandonedCount(ctx, "idle")
	require.NoError(t, err)
	require.EqualValues(t, 30, got, "nobody polling is released after the rebuild")

	stopPolling()
	mu.Lock()
	assert.Empty(t, lost, "no place of the 70 was lost")
	assert.Greater(t, polls, 70*5, "the 70 polled all along")
	mu.Unlock()

	// A released user registers again: a new place at the back.
	again, _ := e.register("idle", "u001")
	st := e.waitNotPending("idle", again.Token)
	assert.Equal(t, "WAITING", st.Status)
	assert.EqualValues(t, 71, st.Position)
}

func (e *env) get(url string) string {
	e.t.Helper()
	resp, err := e.http.Get(url)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return string(b)
}

// sseEvents opens a registration's event stream on the notifier and sends
// the names of its events on the channel until ctx ends.
func (e *env) sseEvents(ctx context.Context, eventsURL string) <-chan string {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.stack.NotifierURL+eventsURL, nil)
	require.NoError(e.t, err)
	resp, err := (&http.Client{}).Do(req)
	require.NoError(e.t, err)
	require.Equal(e.t, http.StatusOK, resp.StatusCode)
	out := make(chan string, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				select {
				case out <- ev:
				default:
				}
			}
		}
	}()
	return out
}

// listen holds a registration's event stream open the way EventSource
// does: a stream that ends (the notifier ends streams whenever the view is
// not trusted, e.g. right after the rebuild that starts a test on a fresh
// Redis) is opened again, until ctx ends. It sends the names of the events.
func (e *env) listen(ctx context.Context, eventsURL string) <-chan string {
	out := make(chan string, 64)
	go func() {
		defer close(out)
		for ctx.Err() == nil {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.stack.NotifierURL+eventsURL, nil)
			if err != nil {
				return
			}
			resp, err := (&http.Client{}).Do(req)
			if err == nil {
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
						select {
						case out <- ev:
						default:
						}
					}
				}
				resp.Body.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return out
}

// A waiter who never polls but holds an event stream keeps the place for
// as long as the stream is open (while one who does neither is released);
// once it closes, the place is released too, and a new stream is told
// "abandoned".
func TestAnEventStreamKeepsThePlace(t *testing.T) {
	const idleSeconds = 2
	it := item("sse")
	it.IdleTimeoutSeconds = idleSeconds
	e := newEnv(t, it)
	e.startWith(func(o *stack.Options) { o.SeenFlush = 300 * time.Millisecond })
	ctx := context.Background()
	line := queue.New(e.rdb)
	users := queue.KeysFor("sse").Users
	listener, lq := e.register("sse", "listener")
	_, cq := e.register("sse", "control")
	e.waitLine("sse", 2)

	sctx, closeStream := context.WithCancel(ctx)
	defer closeStream()
	events := e.listen(sctx, listener.EventsURL)
	select {
	case ev := <-events:
		require.Equal(t, "position", ev)
	case <-time.After(10 * time.Second):
		t.Fatal("no position event")
	}
	// Read from Redis only: a status read through the api is itself a poll.
	require.Eventually(t, func() bool {
		return e.rdb.HGet(ctx, users, cq.PlaceKey()).Val() == "!A"+cq.TokenID
	}, 30*time.Second, 50*time.Millisecond, "the control, neither polling nor streaming, is released")
	time.Sleep(2 * (idleSeconds*time.Second + time.Second))
	ids, err := line.Waiting(ctx, "sse", 0)
	require.NoError(t, err)
	require.Equal(t, []string{lq.TokenID}, ids, "the listener keeps its place over two timeouts")

	closeStream()
	require.Eventually(t, func() bool {
		return e.rdb.HGet(ctx, users, lq.PlaceKey()).Val() == "!A"+lq.TokenID
	}, 30*time.Second, 50*time.Millisecond, "released once the stream closed")
	again := e.sseEvents(ctx, listener.EventsURL)
	select {
	case ev := <-again:
		assert.Equal(t, "abandoned", ev)
	case <-time.After(10 * time.Second):
		t.Fatal("no event on the released place's stream")
	}
}
