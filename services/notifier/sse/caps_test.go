package sse

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"go.uber.org/zap"
)

func TestAddressKeyIsTheIPv4AddressOrTheIPv6Slash64(t *testing.T) {
	for _, tc := range []struct{ ip, want string }{
		{"203.0.113.7", "203.0.113.7/32"},
		{"::ffff:203.0.113.7", "203.0.113.7/32"}, // IPv4-mapped: the IPv4 address
		{"2001:db8::1", "2001:db8::/64"},
		{"2001:db8::ffff:1", "2001:db8::/64"}, // same /64: one subscriber
		{"2001:db8:0:1::1", "2001:db8:0:1::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"127.0.0.1", ""}, // the host itself is not counted
		{"::1", ""},
		{"", ""},
		{"not an address", ""},
	} {
		got := addressKey(tc.ip)
		if tc.want == "" {
			assert.False(t, got.IsValid(), tc.ip)
			continue
		}
		assert.Equal(t, netip.MustParsePrefix(tc.want), got, tc.ip)
	}
}

// 64 goroutines taking a slot at once fill the caps exactly, never past
// them, and giving the slots back at once leaves every count at zero:
// nothing leaks in the maps.
func TestStreamCapsAreExactUnderConcurrency(t *testing.T) {
	const perToken, perAddr, total, n = 3, 5, 8, 64
	c := newStreamCaps(perToken, perAddr, total)
	addrs := []netip.Prefix{addressKey("198.51.100.1"), addressKey("198.51.100.2"), {}}
	for round := range 50 {
		start := make(chan struct{})
		held := make([]slot, n)
		took := make([]bool, n)
		var wg sync.WaitGroup
		for g := range n {
			wg.Go(func() {
				<-start
				var why string
				held[g], why = c.take(fmt.Sprintf("t%d", g%6), addrs[(g/6)%3])
				took[g] = why == ""
			})
		}
		close(start)
		wg.Wait()
		perTok, perAd, all := map[int]int{}, map[int]int{}, 0
		for g, ok := range took {
			if ok {
				perTok[g%6]++
				perAd[(g/6)%3]++
				all++
			}
		}
		// Every token has a try from the uncounted address, so only the
		// notifier's cap can stop the slots short of it.
		require.Equal(t, total, all, "round %d", round)
		for tok, k := range perTok {
			require.LessOrEqual(t, k, perToken, "token t%d", tok)
		}
		require.LessOrEqual(t, perAd[0], perAddr)
		require.LessOrEqual(t, perAd[1], perAddr)
		open, _, _ := c.counts()
		require.Equal(t, total, open)
		for g := range n {
			wg.Go(func() {
				held[g].release()
				held[g].release() // a second release gives back nothing
			})
		}
		wg.Wait()
		open, toks, ads := c.counts()
		require.Equal(t, [3]int{0, 0, 0}, [3]int{open, toks, ads})
	}
}

func TestStreamCapsRefuseInOrderTokenAddressNotifier(t *testing.T) {
	c := newStreamCaps(2, 3, 4)
	a, b := addressKey("198.51.100.1"), addressKey("198.51.100.2")
	var held []slot
	take := func(tok string, addr netip.Prefix, want string) {
		t.Helper()
		sl, why := c.take(tok, addr)
		require.Equal(t, want, why)
		if why == "" {
			held = append(held, sl)
		}
	}
	take("x", a, "")
	take("x", a, "")
	take("x", a, refusedToken)
	take("y", a, "")
	take("y", a, refusedAddress) // address a holds 3
	take("y", b, "")             // 4 in all
	take("z", b, refusedNotifier)
	take("x", b, refusedToken) // the token's cap is checked first
	held[0].release()
	take("z", b, "")
	for i := range held {
		held[i].release()
	}
	n, toks, ads := c.counts()
	assert.Equal(t, [3]int{0, 0, 0}, [3]int{n, toks, ads})

	none := newStreamCaps(-1, 0, -1) // no caps
	for range 100 {
		_, why := none.take("x", a)
		require.Empty(t, why)
	}
}

// The open budget: a second's burst at once, then an open whose turn is
// further than the wait is refused (and gives its turn back), one within
// it waits, and one whose request ends while it waits gives its turn back.
func TestOpenGateWaitsBrieflyOrRefuses(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	g := newOpenGate(10, 50*time.Millisecond) // 10 a second: one per 100 ms, a burst of 10
	g.now = func() time.Time { return now }
	ctx := context.Background()
	for i := range 10 {
		_, ok, err := g.pass(ctx)
		require.NoError(t, err)
		require.True(t, ok, "burst %d", i)
	}
	after, ok, err := g.pass(ctx)
	require.NoError(t, err)
	require.False(t, ok, "the 11th open at the same instant waits 100 ms, more than 50")
	assert.Equal(t, 100*time.Millisecond, after)
	assert.Equal(t, CodeNotifierBusy, refusal(refusedOpenRate, 10, after).Code)
	assert.Equal(t, 1, refusal(refusedOpenRate, 10, after).RetryAfter)

	now = now.Add(100 * time.Millisecond) // one turn back: the refused open did not keep it
	_, ok, err = g.pass(ctx)
	require.NoError(t, err)
	require.True(t, ok)

	g.wait = time.Second
	now = now.Add(60 * time.Millisecond) // the next turn is 40 ms away: within the wait
	_, ok, err = g.pass(ctx)
	require.NoError(t, err)
	require.True(t, ok, "waited its 40 ms")

	// A request that ends while it waits gives its turn back: 200 ms later
	// the next open passes at once (1.6 turns; 0.6 had the turn been kept,
	// and then it would wait, which the cancelled context fails).
	wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	_, ok, err = g.pass(wctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, ok)
	now = now.Add(200 * time.Millisecond)
	done, stop := context.WithCancel(ctx)
	stop()
	_, ok, err = g.pass(done)
	require.NoError(t, err)
	require.True(t, ok, "the abandoned turn was given back")

	_, ok, err = newOpenGate(-1, 0).pass(done) // no cap
	require.NoError(t, err)
	require.True(t, ok)
}

// Past the open rate, with no wait allowed, a stream is refused 503
// NOTIFIER_BUSY with Retry-After before it reads Redis; the budget back,
// a stream opens again. The gate's clock stands still, so nothing depends
// on how fast the machine runs.
func TestOpensPastTheRateAreRefusedBusy(t *testing.T) {
	rdb := testenv.StartRedis(t).Client()
	queueKeys, err := token.New(token.HS256, registration.DevTokenKey, "k1")
	require.NoError(t, err)
	admit, err := token.New(token.EdDSA, registration.DevAdmissionKey, "a1")
	require.NoError(t, err)
	hub := NewHub(nil)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, hub)
	srv := NewServer(hub, rdb, nil, queueKeys, admit, Options{OpenRate: 1, OpenWait: -1}, m, zap.NewNop())
	now := time.Unix(1_700_000_000, 0)
	srv.opens.now = func() time.Time { return now }
	engine := httpserver.New(zap.NewNop(), reg, &httpserver.Readiness{})
	srv.Routes(engine)
	ts := httptest.NewServer(engine)
	defer ts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go hub.Run(ctx, time.Second, time.Second)

	get := func(tokenID string) *http.Response {
		t.Helper()
		raw, err := queueKeys.IssueQueue(token.Queue{TokenID: tokenID, ItemID: "busy", UserID: "u-" + tokenID}, time.Hour)
		require.NoError(t, err)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/api/v1/items/busy/registrations/"+raw+"/events", nil)
		require.NoError(t, err)
		resp, err := ts.Client().Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	require.Equal(t, http.StatusOK, get("t1").StatusCode, "the burst's one open")
	resp := get("t2")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	var body httpserver.ErrorBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Equal(t, CodeNotifierBusy, body.Error.Code)
	assert.Equal(t, float64(1), testutil.ToFloat64(m.refused[refusedOpenRate]))

	now = now.Add(time.Second)
	require.Equal(t, http.StatusOK, get("t2").StatusCode, "a second later the budget is back")
}
