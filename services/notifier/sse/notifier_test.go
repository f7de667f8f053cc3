package sse_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/topics"
)

// admissionOrder reads item's admission events from the start of the topic
// until total distinct tokens were admitted, and returns each token's index
// in admission order and the time of the event that first listed it.
func (w *world) admissionOrder(ctx context.Context, item string, total int) (map[string]int, map[string]time.Time) {
	w.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.ConsumeTopics(topics.Admissions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(w.t, err)
	defer cl.Close()
	order, at := map[string]int{}, map[string]time.Time{}
	for len(order) < total {
		fs := cl.PollFetches(ctx)
		require.NoError(w.t, ctx.Err(), "only %d of %d admitted on the topic", len(order), total)
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := topics.DecodeAdmission(r.Value)
			require.NoError(w.t, err)
			if ev.ItemID != item {
				return
			}
			for _, id := range ev.Admitted {
				if _, ok := order[id]; !ok { // at least once: the first listing counts
					order[id] = len(order)
					at[id] = time.UnixMilli(ev.At)
				}
			}
		})
	}
	return order, at
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// clientRun is what one SSE client saw.
type clientRun struct {
	events  []event
	err     error
	replica int
}

// 1,000 SSE clients on one item, split over two notifier replicas, while the
// real scheduler admits 500/s: every client gets exactly one admitted event,
// with a valid admission token of its own, after everyone ahead of it was
// admitted; the positions each saw never increase; the stream ends after it.
func TestThousandClientsTwoReplicasAdmittedInOrder(t *testing.T) {
	const n = 1000
	w := newWorld(t)
	w.setItem("drop", -1, true, topics.AdmissionPolicy{RatePerSecond: 500, SessionTTLSeconds: 60})
	regs := w.register("drop", n)
	reps := []*notifier{w.notifier(15*time.Second, 0), w.notifier(15*time.Second, 0)}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runs := make([]clientRun, n)
	connected := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i, r := range regs {
		wg.Go(func() {
			runs[i].replica = i % 2
			c, err := w.open(ctx, reps[i%2].eventsURL("drop", r.Token), nil)
			if err != nil {
				runs[i].err = err
				connected <- struct{}{}
				return
			}
			defer c.close()
			first, err := c.next()
			connected <- struct{}{}
			if err != nil {
				runs[i].err = err
				return
			}
			rest, err := c.all()
			runs[i].events, runs[i].err = append([]event{first}, rest...), err
		})
	}
	for range n {
		<-connected
	}
	start := time.Now()
	w.scheduler(100 * time.Millisecond)
	order, eventAt := w.admissionOrder(ctx, "drop", n)
	wg.Wait()
	t.Logf("1,000 admitted and told in %s", time.Since(start).Round(time.Millisecond))

	// The scheduler's order is the registration order (its own tests prove
	// it; this is the premise of the checks below).
	for i, r := range regs {
		require.Equal(t, i, order[r.TokenID], "admission order")
	}
	told := make([]time.Time, n)
	var aheadAdmitted time.Time
	perReplica := [2]int{}
	for i, r := range regs {
		run := runs[i]
		require.NoError(t, run.err, "client %d", i)
		require.NotEmpty(t, run.events, "client %d", i)
		last := run.events[len(run.events)-1]
		require.Equal(t, sse.EventAdmitted, last.Type, "client %d: the stream ends right after admitted (%v)", i, run.events)
		admitted := 0
		var prevPos, prevID int64 = 1 << 62, -1
		for _, ev := range run.events {
			assert.GreaterOrEqual(t, ev.idNum(), prevID, "client %d: ids never decrease", i)
			prevID = ev.idNum()
			switch ev.Type {
			case sse.EventAdmitted:
				admitted++
			case sse.EventPosition:
				p := ev.position(t)
				assert.LessOrEqual(t, p.Position, prevPos, "client %d: positions never increase", i)
				assert.GreaterOrEqual(t, p.Position, int64(1))
				assert.LessOrEqual(t, p.Position, int64(i+1), "client %d: never behind its registration", i)
				prevPos = p.Position
			default:
				t.Errorf("client %d: unexpected %s event", i, ev.Type)
			}
		}
		require.Equal(t, 1, admitted, "client %d: exactly one admitted event", i)
		assert.Equal(t, sse.EventPosition, run.events[0].Type, "client %d: a position on connect", i)
		assert.Equal(t, int64(i+1), run.events[0].position(t).Position, "client %d: the exact position on connect", i)
		var a sse.Admitted
		require.NoError(t, json.Unmarshal([]byte(last.Data), &a))
		adm, err := w.admit.ParseAdmission(a.AdmissionToken)
		require.NoError(t, err, "client %d: the admission token verifies", i)
		assert.Equal(t, r.TokenID, adm.TokenID)
		assert.Equal(t, r.UserID, adm.UserID)
		assert.Equal(t, "drop", adm.ItemID)
		exp, err := time.Parse(time.RFC3339Nano, a.ExpiresAt)
		require.NoError(t, err)
		assert.WithinDuration(t, time.Now().Add(60*time.Second), exp, 10*time.Second)
		told[i] = last.At
		perReplica[run.replica]++
		// Told only once everyone ahead of it was admitted, per the events.
		aheadAdmitted = later(aheadAdmitted, eventAt[r.TokenID])
		assert.False(t, last.At.Before(aheadAdmitted), "client %d told before all ahead of it were admitted", i)
	}
	assert.Equal(t, [2]int{n / 2, n / 2}, perReplica, "both replicas delivered")

	// Within one event the order of telling is free (the first event admits a
	// second's worth at once); across events it follows the events unless the
	// machine is slow. Timing, so reported rather than asserted (the assertion
	// above is the order guarantee).
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return told[idx[a]].Before(told[idx[b]]) })
	var latest time.Time
	inversions := 0
	for _, i := range idx {
		at := eventAt[regs[i].TokenID]
		if at.Before(latest) {
			inversions++
		}
		latest = later(latest, at)
	}
	t.Logf("%d of %d clients were told after a client of a later admission event", inversions, n)
}

// A client that reconnects with Last-Event-ID gets the current state at
// once: its position as it is now (never above what it last saw), or its
// admission if that happened while it was away.
func TestReconnectWithLastEventIDResumes(t *testing.T) {
	w := newWorld(t)
	pol := func(maxActive int64) topics.AdmissionPolicy {
		return topics.AdmissionPolicy{RatePerSecond: 1000, MaxActive: maxActive, SessionTTLSeconds: 60}
	}
	w.setItem("re", -1, true, pol(2))
	regs := w.register("re", 10)
	me := regs[5] // seq 6
	w.scheduler(50 * time.Millisecond)
	waitHead := func(h int64) {
		require.Eventually(t, func() bool {
			st, err := w.line.Stats(context.Background(), "re")
			return err == nil && st.Head == h
		}, 10*time.Second, 10*time.Millisecond)
	}
	waitHead(2)
	n := w.notifier(50*time.Millisecond, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := n.eventsURL("re", me.Token)

	c, err := w.open(ctx, url, nil)
	require.NoError(t, err)
	ev, err := c.next()
	require.NoError(t, err)
	assert.Equal(t, "3000", c.Retry, "retry: is set before the first event")
	require.Equal(t, sse.EventPosition, ev.Type)
	assert.Equal(t, int64(4), ev.position(t).Position)
	assert.Equal(t, "2", ev.progress(), "id: the places gone ahead (seq - position)")
	assert.Contains(t, ev.ID, ".", "and the cursor after it")
	// Heartbeats flow while nothing changes.
	pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	pc, err := w.open(pctx, url, nil)
	require.NoError(t, err)
	_, _ = pc.all() // ends at the deadline
	pcancel()
	assert.Positive(t, pc.Pings, "': ping' comments every heartbeat")
	c.close()

	// Two more are admitted while the client is away.
	w.setItem("re", -1, true, pol(4))
	waitHead(4)
	start := time.Now()
	c, err = w.open(ctx, url, map[string]string{"Last-Event-ID": ev.ID})
	require.NoError(t, err)
	// The cursor is judged by the head this notifier read from Kafka, which
	// may trail Redis's by a moment: the old position (never a higher one)
	// may come first, then the current one.
	// Position events are paced (PositionEvery, 1 s a stream), so when the
	// old one came first the current one follows a pace later.
	ev2, err := c.next()
	require.NoError(t, err)
	assert.Less(t, time.Since(start), time.Second, "a state at once")
	for ev2.Type == sse.EventPosition && ev2.position(t).Position > 2 {
		require.Equal(t, int64(4), ev2.position(t).Position, "never more than told before")
		ev2, err = c.next()
		require.NoError(t, err)
	}
	assert.Less(t, time.Since(start), 3*time.Second, "the current state within a pace of position events")
	require.Equal(t, sse.EventPosition, ev2.Type)
	assert.Equal(t, int64(2), ev2.position(t).Position)
	assert.Equal(t, "4", ev2.progress())
	c.close()

	// A Last-Event-ID further on than the line (the client saw a lower
	// position, say from an estimate) is honoured: positions never go up.
	c, err = w.open(ctx, url, map[string]string{"Last-Event-ID": "5"})
	require.NoError(t, err)
	ev3, err := c.next()
	require.NoError(t, err)
	assert.Equal(t, int64(1), ev3.position(t).Position)
	assert.Equal(t, "5", ev3.progress())
	c.close()

	// Admitted while away: the reconnect gets the admission at once, then
	// the end. Its cursor is judged by the head this notifier read from
	// Kafka, which may not have reached the admission yet when Redis has: a
	// position no higher than the last may come first.
	w.setItem("re", -1, true, pol(6))
	waitHead(6)
	start = time.Now()
	c, err = w.open(ctx, url, map[string]string{"Last-Event-ID": ev2.ID})
	require.NoError(t, err)
	evs, err := c.all()
	require.NoError(t, err)
	assert.Less(t, time.Since(start), time.Second, "the admission at once")
	require.NotEmpty(t, evs)
	for _, e := range evs[:len(evs)-1] {
		require.Equal(t, sse.EventPosition, e.Type)
		assert.LessOrEqual(t, e.position(t).Position, int64(2))
	}
	evs = evs[len(evs)-1:]
	assert.Equal(t, sse.EventAdmitted, evs[0].Type)
	// The id never decreases: the place number when the cursor carried it
	// (6), else the progress (the place number of an admitted token is gone
	// from Redis).
	assert.Contains(t, []string{ev2.progress(), "6"}, evs[0].ID)
	c.close()
}

// A client that never reads and one that disconnects mid-stream do not delay
// the 200 others, and the disconnected stream is unsubscribed.
func TestSlowAndDeadClientsDoNotDelayOthers(t *testing.T) {
	const n = 200
	w := newWorld(t)
	w.setItem("slow", -1, true, topics.AdmissionPolicy{RatePerSecond: 400, SessionTTLSeconds: 60})
	regs := w.register("slow", n+2)
	stuck, gone, others := regs[0], regs[1], regs[2:]
	nt := w.notifier(20*time.Millisecond, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// stuck: headers read, body never read (its buffers fill with heartbeats).
	sc, err := w.open(ctx, nt.eventsURL("slow", stuck.Token), nil)
	require.NoError(t, err)
	defer sc.close()
	// gone: reads its first position, then drops the connection.
	gc, err := w.open(ctx, nt.eventsURL("slow", gone.Token), nil)
	require.NoError(t, err)
	_, err = gc.next()
	require.NoError(t, err)

	runs := make([]clientRun, n)
	connected := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i, r := range others {
		wg.Go(func() {
			c, err := w.open(ctx, nt.eventsURL("slow", r.Token), nil)
			if err == nil {
				defer c.close()
				var first event
				if first, err = c.next(); err == nil {
					connected <- struct{}{}
					var rest []event
					rest, err = c.all()
					runs[i].events = append([]event{first}, rest...)
				}
			}
			if err != nil {
				connected <- struct{}{}
				runs[i].err = err
			}
		})
	}
	for range n {
		<-connected
	}
	require.Equal(t, float64(n+2), w.metric(nt, "waitroom_notifier_open_streams"))
	gc.close() // mid-stream
	w.scheduler(50 * time.Millisecond)
	_, eventAt := w.admissionOrder(ctx, "slow", n+2)
	wg.Wait()
	var lat []time.Duration
	for i, r := range others {
		require.NoError(t, runs[i].err)
		last := runs[i].events[len(runs[i].events)-1]
		require.Equal(t, sse.EventAdmitted, last.Type)
		lat = append(lat, last.At.Sub(eventAt[r.TokenID]))
	}
	slices.Sort(lat)
	t.Logf("admission event -> admitted at the client: p50 %s, p99 %s, max %s", lat[n/2], lat[n*99/100], lat[n-1])
	assert.Less(t, lat[n*99/100], time.Second, "p99 from the scheduler's tick to the client")
	// Both misbehaving streams are gone from the notifier: the dropped one when
	// its connection closed, the stuck one once it was admitted (its writes
	// only fill socket buffers; they never block anyone else).
	require.Eventually(t, func() bool { return w.metric(nt, "waitroom_notifier_open_streams") == 0 }, 10*time.Second, 20*time.Millisecond)
}

// Forged, expired and other-item tokens are refused with the JSON error body
// before any stream opens; the token is accepted in the path, as a bearer and
// as ?token=.
func TestRefusedBeforeTheStreamOpens(t *testing.T) {
	w := newWorld(t)
	w.setItem("tix", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60})
	w.setItem("other", -1, true, topics.AdmissionPolicy{})
	r := w.register("tix", 1)[0]
	nt := w.notifier(time.Second, 0)
	forger, err := token.New(token.HS256, "a-different-key-a-different-key-!!", "k1")
	require.NoError(t, err)
	forged, err := forger.IssueQueue(token.Queue{TokenID: r.TokenID, ItemID: "tix", UserID: r.UserID}, time.Hour)
	require.NoError(t, err)
	expired, err := w.signer.IssueQueue(token.Queue{TokenID: r.TokenID, ItemID: "tix", UserID: r.UserID}, -time.Hour)
	require.NoError(t, err)
	base := nt.URL + "/api/v1/items/"
	for name, c := range map[string]struct {
		url  string
		hdr  map[string]string
		code int
		err  string
	}{
		"forged":          {base + "tix/registrations/" + forged + "/events", nil, 401, "TOKEN_INVALID"},
		"garbage":         {base + "tix/registrations/not-a-token/events", nil, 401, "TOKEN_INVALID"},
		"expired":         {base + "tix/registrations/" + expired + "/events", nil, 401, "TOKEN_EXPIRED"},
		"other item":      {base + "other/registrations/" + r.Token + "/events", nil, 403, "TOKEN_ITEM_MISMATCH"},
		"missing":         {base + "tix/registrations/current/events", nil, 401, "TOKEN_MISSING"},
		"forged bearer":   {base + "tix/registrations/current/events", map[string]string{"Authorization": "Bearer " + forged}, 401, "TOKEN_INVALID"},
		"forged query":    {base + "tix/registrations/current/events?token=" + forged, nil, 401, "TOKEN_INVALID"},
		"invalid item id": {base + "t%20x/registrations/" + r.Token + "/events", nil, 400, "INVALID_ITEM_ID"},
	} {
		resp, err := w.open(context.Background(), c.url, c.hdr)
		require.NoError(t, err, name)
		assert.Equal(t, c.code, resp.Resp.StatusCode, name)
		assert.Contains(t, resp.Resp.Header.Get("Content-Type"), "application/json", name)
		var body httpserver.ErrorBody
		require.NoError(t, json.NewDecoder(resp.Resp.Body).Decode(&body), name)
		assert.Equal(t, c.err, body.Error.Code, name)
		assert.NotEmpty(t, body.Error.Message, name)
		resp.close()
	}
	for name, c := range map[string]struct {
		url string
		hdr map[string]string
	}{
		"path":   {nt.eventsURL("tix", r.Token), nil},
		"bearer": {nt.eventsURL("tix", "current"), map[string]string{"Authorization": "Bearer " + r.Token}},
		"query":  {nt.eventsURL("tix", "current") + "?token=" + r.Token, nil},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := w.open(ctx, c.url, c.hdr)
		require.NoError(t, err, name)
		require.Equal(t, http.StatusOK, s.Resp.StatusCode, name)
		assert.Equal(t, "text/event-stream", s.Resp.Header.Get("Content-Type"), name)
		assert.Equal(t, "no-cache", s.Resp.Header.Get("Cache-Control"), name)
		assert.Equal(t, "no", s.Resp.Header.Get("X-Accel-Buffering"), name)
		ev, err := s.next()
		require.NoError(t, err, name)
		assert.Equal(t, sse.EventPosition, ev.Type, name)
		p := ev.position(t)
		assert.Equal(t, int64(1), p.Position, name)
		assert.Nil(t, p.EtaSeconds, "%s: paused: no ETA", name)
		s.close()
		cancel()
	}
}

// A registration already in a final state gets that state at once and the
// stream ends; one that reaches it while streaming gets it then.
func TestFinalStates(t *testing.T) {
	w := newWorld(t)
	pol := topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60}
	w.setItem("f", -1, true, pol)
	w.setItem("soldout", 0, true, pol)
	w.setItem("closed", -1, false, pol)
	regs := w.register("f", 6)
	so := w.register("soldout", 1)[0]
	cl := w.register("closed", 1)[0]
	ctx := context.Background()
	// regs[0] leaves; regs[1] is admitted; regs[2] admitted then completed;
	// regs[3] admitted long ago (expired).
	_, err := w.line.Apply(ctx, []queue.Op{{Kind: queue.OpLeave, ItemID: "f", TokenID: regs[0].TokenID, UserID: regs[0].UserID, Offset: 100}})
	require.NoError(t, err)
	w.setItem("f", -1, true, topics.AdmissionPolicy{RatePerSecond: 1, SessionTTLSeconds: 60})
	tk, err := w.line.Promote(ctx, "f", 1, time.Now().Add(-2*time.Minute), time.Second) // sessions that ended a minute ago
	require.NoError(t, err)
	require.Equal(t, []string{regs[1].TokenID}, tk.Unpublished)
	w.setItem("f", -1, true, topics.AdmissionPolicy{RatePerSecond: 2, SessionTTLSeconds: 60})
	tk, err = w.line.Promote(ctx, "f", 1, time.Now(), time.Second)
	require.NoError(t, err)
	require.Equal(t, []string{regs[1].TokenID, regs[2].TokenID, regs[3].TokenID}, tk.Unpublished, "regs[1] expired and regs[2..3] admitted")
	require.NoError(t, w.line.AckPublished(ctx, 1, []string{"f"}, []int{int(tk.UnpublishedTotal)})) // published: told
	ok, err := w.line.Complete(ctx, "f", regs[3].TokenID, regs[3].UserID)
	require.NoError(t, err)
	require.True(t, ok)
	w.setItem("f", -1, true, pol)
	nt := w.notifier(time.Second, 0)

	only := func(url, wantType, wantStatus string) event {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, err := w.open(cctx, url, nil)
		require.NoError(t, err)
		defer c.close()
		require.Equal(t, http.StatusOK, c.Resp.StatusCode)
		evs, err := c.all()
		require.NoError(t, err, "the stream ends by itself")
		require.Len(t, evs, 1, "%v", evs)
		assert.Equal(t, wantType, evs[0].Type)
		if wantStatus != "" {
			var term sse.Terminal
			require.NoError(t, json.Unmarshal([]byte(evs[0].Data), &term))
			assert.Equal(t, wantStatus, term.Status)
		}
		return evs[0]
	}
	only(nt.eventsURL("f", regs[0].Token), sse.EventLeft, "LEFT")
	only(nt.eventsURL("f", regs[1].Token), sse.EventExpired, "EXPIRED")
	ev := only(nt.eventsURL("f", regs[2].Token), sse.EventAdmitted, "")
	var a sse.Admitted
	require.NoError(t, json.Unmarshal([]byte(ev.Data), &a))
	adm, err := w.admit.ParseAdmission(a.AdmissionToken)
	require.NoError(t, err)
	assert.Equal(t, regs[2].TokenID, adm.TokenID)
	only(nt.eventsURL("f", regs[3].Token), sse.EventCompleted, "COMPLETED")
	only(nt.eventsURL("soldout", so.Token), sse.EventSoldOut, "SOLD_OUT")
	only(nt.eventsURL("closed", cl.Token), sse.EventClosed, "CLOSED")

	// A registration the line has not applied yet is pending, then waiting.
	pend, err := w.signer.IssueQueue(token.Queue{TokenID: "f-late", ItemID: "f", UserID: "late", Offset: 200}, time.Hour)
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := w.open(cctx, nt.eventsURL("f", pend), nil)
	require.NoError(t, err)
	defer c.close()
	ev, err = c.next()
	require.NoError(t, err)
	assert.Equal(t, sse.EventPending, ev.Type)
	_, err = w.line.Apply(ctx, []queue.Op{{Kind: queue.OpRegister, ItemID: "f", TokenID: "f-late", UserID: "late", Offset: 200}})
	require.NoError(t, err)
	ev, err = c.next()
	require.NoError(t, err)
	require.Equal(t, sse.EventPosition, ev.Type)
	assert.Equal(t, int64(3), ev.position(t).Position, "behind regs[4] and regs[5]")

	// The item sells out while it waits: sold_out, then the end.
	w.setItem("f", 0, true, pol)
	evs, err := c.all()
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, sse.EventSoldOut, evs[0].Type)

	// Closed while waiting, too.
	w.setItem("f", -1, false, pol)
	c3, err := w.open(cctx, nt.eventsURL("f", regs[4].Token), nil)
	require.NoError(t, err)
	defer c3.close()
	evs, err = c3.all()
	require.NoError(t, err)
	require.NotEmpty(t, evs)
	assert.Equal(t, sse.EventClosed, evs[len(evs)-1].Type)
}

// A registration applied but never placed (REJECTED: a bypass code with no
// use left, a record sent to the DLQ) ends its stream with "rejected" and the
// item's rejectMessage, so a page shows the operator's word, not a reconnect.
func TestRejectedCarriesTheOperatorsMessage(t *testing.T) {
	w := newWorld(t)
	pol := topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60}
	w.setItem("r", -1, true, pol)
	w.register("r", 3) // offsets 0..2 applied
	nt := w.notifier(time.Second, 0)
	ctx := context.Background()
	never, err := w.signer.IssueQueue(token.Queue{TokenID: "r-never", ItemID: "r", UserID: "never", Offset: 1}, time.Hour)
	require.NoError(t, err)
	final := func() sse.Terminal {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, err := w.open(cctx, nt.eventsURL("r", never), nil)
		require.NoError(t, err)
		defer c.close()
		evs, err := c.all()
		require.NoError(t, err, "the stream ends by itself")
		require.Len(t, evs, 1, "%v", evs)
		require.Equal(t, sse.EventRejected, evs[0].Type)
		var term sse.Terminal
		require.NoError(t, json.Unmarshal([]byte(evs[0].Data), &term))
		assert.Equal(t, "REJECTED", term.Status)
		return term
	}
	assert.Empty(t, final().Message, "no message set: none sent")

	w.setState(topics.ItemState{V: topics.Version, ItemID: "r", Name: "r", Stock: -1, Enabled: true, Policy: pol,
		RejectMessage: "Staff codes are used up; the public sale opens at noon"})
	require.Eventually(t, func() bool {
		return final().Message == "Staff codes are used up; the public sale opens at noon"
	}, 10*time.Second, 50*time.Millisecond, "the item's message, once the notifier has the new state")
}

// Undecodable admission records are counted and handed to the DLQ hook; the
// stream goes on.
func TestUndecodableAdmissionRecordsAreSkipped(t *testing.T) {
	w := newWorld(t)
	nt := w.notifier(time.Second, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, w.prod.ProduceSync(ctx,
		&kgo.Record{Topic: topics.Admissions, Key: []byte("x"), Value: []byte("{nope")},
		&kgo.Record{Topic: topics.Admissions, Key: []byte("x"), Value: []byte(`{"v":2,"itemId":"x"}`)},
		&kgo.Record{Topic: topics.Admissions, Key: []byte("y"), Value: topics.Encode(&topics.AdmissionEvent{V: 1, ItemID: "x", Head: 1})},
	).FirstErr())
	require.Eventually(t, func() bool {
		return w.metric(nt, "waitroom_notifier_admission_records_undecodable_total") == 3
	}, 10*time.Second, 20*time.Millisecond)
}
