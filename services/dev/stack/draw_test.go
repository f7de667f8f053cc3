package stack_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/topics"
)

// adminPost changes item through the admin API (POST .../items/:itemId) and
// returns the answer's body.
func adminPost(t *testing.T, e *env, item, body string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.stack.SchedulerURLs[0]+"/internal/admin/v1/items/"+item, jsonBody(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := e.http.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	return b
}

// records reads every committed record of topic off the brokers (to the last
// stable offset; the transaction markers, kept to reach it, left out), in
// partition order.
func records(t *testing.T, e *env, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(e.kcl).ListCommittedOffsets(ctx, topic)
	require.NoError(t, err)
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	require.NoError(t, err)
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading %s", topic)
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := want[r.Partition]; ok && r.Offset < end {
				if !r.Attrs.IsControl() {
					out = append(out, r)
				}
				if r.Offset == end-1 {
					delete(want, r.Partition)
				}
			}
		})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Partition < out[j].Partition || out[i].Partition == out[j].Partition && out[i].Offset < out[j].Offset
	})
	return out
}

// audit is this test's own recomputation of an item's line from the records
// (not the consumer's code, nor pkg/domain/draw): registrations pooled for a window
// are placed by the first draw record of a window at or above theirs, in
// ascending sha256(seed bytes || tokenId bytes); registrations without a
// window while some are pooled queue behind the windows pooled then, in
// record order; the others queue in record order. It checks each revealed seed against the item's commitment on
// waitroom.items: sha256 applied round times gives drawCommit.
type audit struct {
	line  []string            // placed, in order
	pool  map[string]int64    // tokenId -> window, not drawn yet
	late  []string            // waiting for a pending draw, in record order
	draws []auditDraw         // the draws applied, in record order
	arriv map[string]int      // tokenId -> rank of arrival (record order)
	users map[string]bool     // users holding a place or a pool entry
	drawn map[string][]string // window -> the tokens it placed, in order
}

type auditDraw struct {
	Window, Round int64
	Seed, Commit  string
}

func recompute(t *testing.T, e *env, item string) *audit {
	t.Helper()
	var commit string
	for _, r := range records(t, e, topics.Items) {
		var s struct {
			ItemID     string `json:"itemId"`
			DrawCommit string `json:"drawCommit"`
		}
		if string(r.Key) == item && json.Unmarshal(r.Value, &s) == nil && s.DrawCommit != "" {
			commit = s.DrawCommit
		}
	}
	require.NotEmpty(t, commit, "the item's draw commitment is on %s", topics.Items)
	a := &audit{pool: map[string]int64{}, arriv: map[string]int{}, users: map[string]bool{}, drawn: map[string][]string{}}
	var lastWindow, lateAfter int64
	for _, r := range records(t, e, topics.Registrations) {
		if string(r.Key) != item {
			continue
		}
		var ev struct {
			Kind    string `json:"kind"`
			TokenID string `json:"tokenId"`
			UserID  string `json:"userId"`
			Window  int64  `json:"window"`
			Draw    *auditDraw
		}
		require.NoError(t, json.Unmarshal(r.Value, &ev))
		switch ev.Kind {
		case "register":
			require.False(t, a.users[ev.UserID], "this test registers each user once")
			a.users[ev.UserID] = true
			a.arriv[ev.TokenID] = len(a.arriv)
			switch {
			case ev.Window > lastWindow:
				a.pool[ev.TokenID] = ev.Window
			case len(a.late) > 0 || ev.Window == 0 && len(a.pool) > 0:
				if len(a.late) == 0 { // the late ones wait for every window pooled so far
					lateAfter = 0
					for _, w := range a.pool {
						lateAfter = max(lateAfter, w)
					}
				}
				a.late = append(a.late, ev.TokenID)
			default:
				a.line = append(a.line, ev.TokenID)
			}
		case "draw":
			d := *ev.Draw
			if d.Window <= lastWindow {
				continue // a second copy of a draw
			}
			require.Equal(t, commit, d.Commit, "the draw reveals a seed of the committed chain")
			h, err := hex.DecodeString(d.Seed)
			require.NoError(t, err)
			for range d.Round {
				s := sha256.Sum256(h)
				h = s[:]
			}
			require.Equal(t, commit, hex.EncodeToString(h), "sha256^%d(seed) is the commitment", d.Round)
			seed, _ := hex.DecodeString(d.Seed)
			type keyed struct {
				k  []byte
				id string
			}
			var ks []keyed
			for tok, w := range a.pool {
				if w <= d.Window {
					k := sha256.Sum256(append(append([]byte{}, seed...), tok...))
					ks = append(ks, keyed{k[:], tok})
				}
			}
			sort.Slice(ks, func(i, j int) bool {
				if c := bytes.Compare(ks[i].k, ks[j].k); c != 0 {
					return c < 0
				}
				return ks[i].id < ks[j].id
			})
			var placed []string
			for _, k := range ks {
				placed = append(placed, k.id)
				delete(a.pool, k.id)
			}
			a.drawn[fmt.Sprint(d.Window)] = placed
			a.line = append(a.line, placed...)
			waits := false
			for _, w := range a.pool {
				waits = waits || w <= lateAfter
			}
			if !waits {
				a.line = append(a.line, a.late...)
				a.late = nil
			}
			lastWindow = d.Window
			a.draws = append(a.draws, d)
		case "leave": // a probe that came before the api knew of the sale
			delete(a.pool, ev.TokenID)
			a.line = slices.DeleteFunc(a.line, func(id string) bool { return id == ev.TokenID })
			a.late = slices.DeleteFunc(a.late, func(id string) bool { return id == ev.TokenID })
			delete(a.users, ev.UserID)
		default:
			t.Fatalf("this test publishes no %s record", ev.Kind)
		}
	}
	return a
}

// spearman is the rank correlation of the draw order of ids with their
// arrival order: near 0 for a draw independent of arrival.
func spearman(ids []string, arrival map[string]int) float64 {
	type pair struct{ drawn, arrived int }
	ps := make([]pair, len(ids))
	for i, id := range ids {
		ps[i] = pair{drawn: i, arrived: arrival[id]}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].arrived < ps[j].arrived })
	n := float64(len(ps))
	var d2 float64
	for rank, p := range ps {
		d := float64(p.drawn - rank)
		d2 += d * d
	}
	return 1 - 6*d2/(n*(n*n-1))
}

// The issue's pre-queue: a sale scheduled through the admin API (which
// commits it to a hash chain on waitroom.items); 2,000 registrations from 20
// concurrent clients before opensAt, each answered PRE_QUEUE with the
// countdown; at opensAt the scheduler reveals the seed and the line is the
// permutation this test recomputes on its own from the records; it is not
// the arrival order; registrations after opensAt are behind all of them; a
// rebuild of the view gives the same line; admission then follows it.
func TestPreQueueDrawIsRecomputableFromTheRecords(t *testing.T) {
	const sale, clients, per = "sale", 20, 100
	e := newEnv(t, item(sale))
	e.start()
	opensAt := time.Now().Add(20 * time.Second).UnixMilli()
	adminPost(t, e, sale, fmt.Sprintf(`{"opensAt":%d}`, opensAt))

	regs := []token.Queue{e.firstPreQueued(sale, "c00-u000")} // the first of client 0's

	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if c == 0 && i == 0 {
					continue // registered above
				}
				r, q := e.register(sale, fmt.Sprintf("c%02d-u%03d", c, i))
				require.Equal(t, "PRE_QUEUE", r.Status)
				require.Equal(t, opensAt, r.DrawAt)
				require.Equal(t, opensAt, r.OpensAt)
				mu.Lock()
				regs = append(regs, q)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Less(t, time.Now().UnixMilli(), opensAt, "the 2,000 registrations took longer than the countdown: raise it")

	// Before the draw: a status answers PRE_QUEUE with the draw time and the
	// size of the draw, and nobody has a place.
	var st httpapi.StatusResponse
	require.Eventually(t, func() bool {
		a := e.do(http.MethodGet, "/api/v1/items/"+sale+"/registrations/"+e.tokenOf(regs[0]), nil)
		require.Equal(t, http.StatusOK, a.Code)
		a.decode(t, &st)
		return st.InDraw == clients*per
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, "PRE_QUEUE", st.Status)
	require.Equal(t, opensAt, st.DrawAt)
	require.Positive(t, st.PollAfterMs)
	ids, err := queue.New(e.rdb).Waiting(context.Background(), sale, 0)
	require.NoError(t, err)
	require.Empty(t, ids)

	// After opensAt: later arrivals.
	time.Sleep(time.Until(time.UnixMilli(opensAt)))
	const later = 30
	for i := range later {
		r, q := e.register(sale, fmt.Sprintf("later%02d", i))
		require.Equal(t, "QUEUED", r.Status)
		regs = append(regs, q)
	}
	line := e.waitLine(sale, clients*per+later)

	a := recompute(t, e, sale)
	require.Len(t, a.draws, 1)
	require.Equal(t, opensAt, a.draws[0].Window)
	require.Equal(t, int64(1), a.draws[0].Round)
	require.Empty(t, a.pool)
	require.Equal(t, a.line, line, "the live line is the recomputed one")
	drawn := a.drawn[fmt.Sprint(opensAt)]
	require.Len(t, drawn, clients*per)
	require.ElementsMatch(t, drawn, line[:clients*per], "everyone registered before opensAt is ahead of every later arrival")
	rho := spearman(drawn, a.arriv)
	t.Logf("rank correlation of the draw with the arrival order: %.4f (n=%d)", rho, len(drawn))
	require.Less(t, math.Abs(rho), 0.135, "the draw follows the arrival order") // 1/sqrt(n-1) ≈ 0.0224: 0.135 is 6 sigma

	// Once placed, a status answers the position.
	st = e.status(sale, e.tokenOf(regs[0]))
	require.Equal(t, "WAITING", st.Status)
	pos := 0
	for i, id := range line {
		if id == regs[0].TokenID {
			pos = i + 1
		}
	}
	require.Equal(t, int64(pos), st.Position)

	// A rebuild of the view from the topics gives the same line.
	e.flushAll()
	require.Eventually(t, func() bool {
		m, ok, err := view.Read(context.Background(), e.rdb)
		if err != nil || !ok || m.State != view.Ready {
			return false
		}
		ids, err := queue.New(e.rdb).Waiting(context.Background(), sale, 0)
		return err == nil && len(ids) == len(line)
	}, 60*time.Second, 50*time.Millisecond, "the view is rebuilt")
	rebuilt, err := queue.New(e.rdb).Waiting(context.Background(), sale, 0)
	require.NoError(t, err)
	require.Equal(t, line, rebuilt, "the rebuilt line is the drawn one")

	// Admission follows the drawn order.
	adminPut(t, e, sale, `{"ratePerSecond":5,"maxActive":3}`)
	require.Eventually(t, func() bool {
		s, code := e.seen(sale, e.tokenOfID(regs, line[0]))
		return code == http.StatusOK && s.Status == "ADMITTED"
	}, 30*time.Second, 50*time.Millisecond, "the first drawn is admitted first")
	st = e.status(sale, e.tokenOfID(regs, line[len(line)-1]))
	require.Equal(t, "WAITING", st.Status)
}

// firstPreQueued registers user for item once the api knows the item takes
// a pre-queue (the admin API answered; the api's item cache follows): a
// registration answered QUEUED meanwhile (a probe user) leaves again.
func (e *env) firstPreQueued(item, user string) token.Queue {
	e.t.Helper()
	var q token.Queue
	probe := 0
	require.Eventually(e.t, func() bool {
		probe++
		r, _ := e.register(item, fmt.Sprintf("probe%d", probe))
		if r.Status != "PRE_QUEUE" {
			a := e.do(http.MethodDelete, "/api/v1/items/"+item+"/registrations/"+r.Token, nil)
			require.Equal(e.t, http.StatusAccepted, a.Code)
			return false
		}
		a := e.do(http.MethodDelete, "/api/v1/items/"+item+"/registrations/"+r.Token, nil)
		require.Equal(e.t, http.StatusAccepted, a.Code)
		return true
	}, 10*time.Second, 50*time.Millisecond)
	r, q := e.register(item, user)
	require.Equal(e.t, "PRE_QUEUE", r.Status)
	return q
}

// tokenOf signs q's queue token again (the test holds the key).
func (e *env) tokenOf(q token.Queue) string {
	e.t.Helper()
	tok, err := e.signer.IssueQueue(q, time.Hour)
	require.NoError(e.t, err)
	return tok
}

func (e *env) tokenOfID(regs []token.Queue, id string) string {
	e.t.Helper()
	for _, q := range regs {
		if q.TokenID == id {
			return e.tokenOf(q)
		}
	}
	e.t.Fatalf("no registration holds token %s", id)
	return ""
}

// Random mode end to end: registrations over several windows are each
// answered PRE_QUEUE with their window's end; each window is drawn in turn
// (consecutive rounds of one committed chain), placed behind the windows
// before it, in the order this test recomputes from the records; over the
// draws the order is not the arrival order.
func TestRandomModeDrawsEachWindow(t *testing.T) {
	const it = "lottery"
	e := newEnv(t, item(it))
	e.start()
	adminPost(t, e, it, `{"mode":"random","drawWindowSeconds":1}`)
	e.firstPreQueued(it, "first")

	var mu sync.Mutex
	n := 1
	var wg sync.WaitGroup
	stop := time.Now().Add(5 * time.Second)
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				before := time.Now().UnixMilli()
				r, _ := e.register(it, fmt.Sprintf("c%d-u%04d", c, i))
				require.Equal(t, "PRE_QUEUE", r.Status)
				require.Zero(t, r.OpensAt)
				require.Greater(t, r.DrawAt, before, "the window ends after the registration")
				require.Zero(t, r.DrawAt%1000, "windows of 1 s aligned to the epoch")
				mu.Lock()
				n++
				mu.Unlock()
				time.Sleep(10 * time.Millisecond) // a few hundred a second: the machine is shared
			}
		}()
	}
	wg.Wait()
	line := e.waitLine(it, n)
	a := recompute(t, e, it)
	require.Equal(t, a.line, line, "the live line is the recomputed one")
	require.GreaterOrEqual(t, len(a.draws), 4, "a draw per window")
	var sum float64
	k := 0
	for i, d := range a.draws {
		require.Equal(t, int64(i+1), d.Round, "consecutive rounds of the chain")
		if i > 0 {
			require.Greater(t, d.Window, a.draws[i-1].Window)
		}
		if ids := a.drawn[fmt.Sprint(d.Window)]; len(ids) >= 60 {
			rho := spearman(ids, a.arriv)
			t.Logf("window %d: %d drawn, rank correlation with arrival %.3f", d.Window, len(ids), rho)
			// Under a fair draw rho is about normal with sd 1/sqrt(n-1); a draw
			// that kept the arrival order gives 1. 6 sd fails a fair draw about
			// once in 10^9 windows (4 sd, once in 16,000, did fail a CI run).
			require.Less(t, math.Abs(rho), 6/math.Sqrt(float64(len(ids)-1)), "window %d's draw follows the arrival order", d.Window)
			sum += rho * math.Sqrt(float64(len(ids)-1)) // its z score
			k++
		}
	}
	require.GreaterOrEqual(t, k, 3)
	// The windows' z scores pooled (Stouffer): again about normal, sd 1.
	require.Less(t, math.Abs(sum/math.Sqrt(float64(k))), 6.0, "over the draws the order follows the arrival order")
}

// The page through a scheduled sale in a real browser: a countdown while
// the registration is pre-queued, then, once the sale opens and the draw
// places everyone, the drawn position (the one the line holds), then the
// admission. Screenshots of the countdown and the position are saved.
func TestPreQueuePageInBrowser(t *testing.T) {
	ctx := browser(t)
	const it = "premiere"
	e := newEnv(t, item(it))
	e.start()
	opensAt := time.Now().Add(12 * time.Second).UnixMilli()
	adminPost(t, e, it, fmt.Sprintf(`{"opensAt":%d}`, opensAt))
	e.firstPreQueued(it, "early-0")
	for i := 1; i < 15; i++ {
		r, _ := e.register(it, fmt.Sprintf("early-%d", i))
		require.Equal(t, "PRE_QUEUE", r.Status)
	}

	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.stack.URL+"/items/"+it+"/wait?userId=browser-user")))
	_, err := runRetry(ctx, chromedp.Poll[bool](`document.getElementById("status").dataset.status === "PRE_QUEUE"`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err, "the page shows the pre-queue")
	remaining := func() int {
		s, err := runRetry(ctx, chromedp.Evaluate[string](`document.getElementById("countdown").dataset.remaining || ""`))
		require.NoError(t, err)
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "countdown %q", s)
		return n
	}
	r1 := remaining()
	require.Greater(t, r1, 0)
	require.LessOrEqual(t, r1, 12)
	visible, err := runRetry(ctx, chromedp.Evaluate[bool](`getComputedStyle(document.getElementById("prequeue")).display === "block" &&
		getComputedStyle(document.getElementById("position")).display === "none"`))
	require.NoError(t, err)
	require.True(t, visible, "the countdown shows, no position yet")
	shot, err := runRetry(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	time.Sleep(1500 * time.Millisecond)
	require.Less(t, remaining(), r1, "the countdown counts down")

	// The sale opens: the page shows the drawn position, which is the line's.
	_, err = runRetry(ctx, chromedp.Poll[bool](`document.getElementById("status").dataset.status === "WAITING"`,
		chromedp.WithPollingTimeout(40*time.Second)))
	require.NoError(t, err, "the page shows the position after the draw")
	require.GreaterOrEqual(t, time.Now().UnixMilli(), opensAt)
	line := e.waitLine(it, 16)
	pos, err := runRetry(ctx, chromedp.Text("#position"))
	require.NoError(t, err)
	n, err := strconv.Atoi(pos)
	require.NoError(t, err, "position %q", pos)
	raw, err := runRetry(ctx, chromedp.Evaluate[string](`JSON.parse(localStorage.getItem("waitroom:`+it+`")).token`))
	require.NoError(t, err)
	q, err := e.signer.ParseQueue(raw)
	require.NoError(t, err)
	require.Equal(t, q.TokenID, line[n-1], "the page's position is the browser's place in the drawn line")
	shot2, err := runRetry(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)

	adminPut(t, e, it, `{"ratePerSecond":20,"maxActive":20}`)
	_, err = runRetry(ctx, chromedp.Poll[bool](`document.getElementById("status").dataset.status === "ADMITTED"`,
		chromedp.WithPollingTimeout(30*time.Second)))
	require.NoError(t, err, "the page shows the admission")
	transport, err := runRetry(ctx, chromedp.Evaluate[string](`document.body.dataset.transport || ""`))
	require.NoError(t, err)
	require.Equal(t, "sse", transport, "the stream carried the pre-queue, the position and the admission")
	t.Logf("screenshots: %s %s (drawn position %d of 16)", saveArtefact(t, "prequeue-countdown.png", shot),
		saveArtefact(t, "prequeue-drawn.png", shot2), n)
}
