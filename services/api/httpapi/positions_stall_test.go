package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/services/api/httpapi"
)

// stallScript holds redis-server for ARGV[1] µs, as a long command does (a
// snapshot's COPY of a long line, a large admission tick): every command
// behind it waits.
var stallScript = redis.NewScript(`
local t = redis.call('TIME')
local from = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - from >= tonumber(ARGV[1])
return 1`)

// timedStatus reads tok's status with a client of its own (no require: it
// runs off the test's goroutine) and says how long it took.
func timedStatus(url, item, tok string) (httpapi.StatusResponse, time.Duration, error) {
	start := time.Now()
	resp, err := http.Get(url + "/api/v1/items/" + item + "/registrations/" + tok)
	if err != nil {
		return httpapi.StatusResponse{}, 0, fmt.Errorf("get status: %w", err)
	}
	defer resp.Body.Close()
	var st httpapi.StatusResponse
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, 0, fmt.Errorf("decode status: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return st, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	return st, time.Since(start), nil
}

// While redis-server is held by one long command, a token this replica read
// exactly before is answered from memory at once, from the item's last head
// (the read of the next one waits behind the command), not after the
// command; a token read for the first time waits for Redis, as before.
func TestStatusOfAKnownTokenDoesNotWaitForAStalledRedis(t *testing.T) {
	const fresh, stall = 100 * time.Millisecond, time.Second
	e := newAPIWith(t, func(c *httpapi.Config) {
		c.MotionFresh = fresh
		c.Throttle.StatusRate, c.Throttle.StatusBurst = 10_000, 10_000
	}, item("stall"))
	var toks []string
	for i := range 3 {
		r, q := e.register("stall", fmt.Sprintf("user-%d", i))
		e.apply(q)
		toks = append(toks, r.Token)
	}
	known, unknown := toks[1], toks[2]
	require.Equal(t, int64(2), e.status("stall", known).Position, "the exact read, remembered")
	require.Equal(t, int64(2), e.status("stall", known).Position, "from memory: the item's head read")

	// A steady stream of reads of known (one each 5 ms) runs from before
	// the stall to its end; the item's head is read again past half of fresh.
	ctx := context.Background()
	var since atomic.Pointer[time.Time]
	held := make(chan time.Time, 1)
	first := make(chan read, 1)
	go func() {
		time.Sleep(3 * fresh)
		go func() {
			if err := stallScript.Run(ctx, e.rdb, nil, stall.Microseconds()).Err(); err != nil {
				t.Errorf("stall redis-server: %v", err)
			}
			held <- time.Now()
		}()
		probe := redis.NewClient(&redis.Options{Addr: e.cfg.Redis.Addr, ReadTimeout: 20 * time.Millisecond, MaxRetries: -1})
		defer probe.Close()
		for probe.Ping(ctx).Err() == nil {
			time.Sleep(time.Millisecond)
		}
		now := time.Now()
		since.Store(&now)
		time.Sleep(2 * fresh)
		st, took, err := timedStatus(e.url, "stall", unknown)
		first <- read{st, took, err}
	}()

	var slowest time.Duration
	pastFresh := 0
	for {
		at := time.Now()
		st, took, err := timedStatus(e.url, "stall", known)
		require.NoError(t, err)
		assert.Equal(t, "WAITING", st.Status)
		assert.Equal(t, int64(2), st.Position)
		if s := since.Load(); s != nil && at.After(*s) {
			slowest = max(slowest, took)
			if at.Sub(*s) > fresh {
				pastFresh++
			}
		}
		select {
		case end := <-held:
			assert.Less(t, slowest, 100*time.Millisecond,
				"the slowest read of a known token while redis-server was held %s (%d reads past fresh)", end.Sub(*since.Load()), pastFresh)
			require.Positive(t, pastFresh, "reads ran past fresh while redis-server was held")
			r := <-first
			require.NoError(t, r.err)
			t.Logf("redis-server held %s: %d reads of the known token past fresh, the slowest %s; the first read of another token %s",
				end.Sub(*since.Load()), pastFresh, slowest, r.took)
			assert.Equal(t, int64(3), r.st.Position)
			assert.Greater(t, r.took, stall/3, "a token read for the first time waits for Redis")
			return
		default:
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// read is one timedStatus.
type read struct {
	st   httpapi.StatusResponse
	took time.Duration
	err  error
}
