package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/fieldmac"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/api/httpapi"
)

// statusWith reads tok's status sending cursor ("": none).
func (s *api) statusWith(itemID, tok, cursor string) httpapi.StatusResponse {
	s.t.Helper()
	path := "/api/v1/items/" + itemID + "/registrations/" + tok
	if cursor != "" {
		path += "?cursor=" + url.QueryEscape(cursor)
	}
	a := s.do(http.MethodGet, path, nil)
	require.Equal(s.t, http.StatusOK, a.Code, "%s", a.Body)
	var st httpapi.StatusResponse
	a.decode(s.t, &st)
	return st
}

// truth is q's exact position in Redis now (0: not waiting).
func (s *api) truth(q token.Queue) int64 {
	s.t.Helper()
	st, err := s.line.Status(context.Background(), q.ItemID, q.PlaceKey(), q.TokenID, q.Partition, q.Offset)
	require.NoError(s.t, err)
	if st.State != line.Waiting {
		return 0
	}
	return st.Position
}

// lineUp registers n people for item and puts them in its line, in order.
func (s *api) lineUp(item string, n int) ([]string, []token.Queue) {
	s.t.Helper()
	toks, qs := make([]string, n), make([]token.Queue, n)
	for i := range n {
		r, q := s.register(item, fmt.Sprintf("user-%d", i))
		s.apply(q)
		toks[i], qs[i] = r.Token, q
	}
	return toks, qs
}

// A poller behind a front door alternates two api replicas over one view,
// one of which answers from a stale estimate (its item motion kept for 10 s):
// sending back each answer's cursor, it is never told a larger position than
// before, though that replica alone would have told it one.
func TestAPollerAlternatingReplicasIsNeverToldMore(t *testing.T) {
	it := item("duo")
	it.Policy.RatePerSecond = 5
	fresh := newAPIWith(t, func(c *httpapi.Config) { c.Throttle.StatusRate = 0 }, it)
	stale := fresh.twin(func(c *httpapi.Config) { c.MotionFresh = 10 * time.Second })
	toks, qs := fresh.lineUp("duo", 30)
	tok, q := toks[24], qs[24]

	// The stale replica reads the token exactly, then keeps the item's motion.
	require.Equal(t, int64(25), stale.status("duo", tok).Position)
	require.Equal(t, int64(25), stale.status("duo", tok).Position)

	cursor, last, staleMore := "", int64(0), 0
	for round := range 6 {
		fresh.admit("duo")
		time.Sleep(300 * time.Millisecond) // past the fresh replica's WR_STATUS_MOTION_FRESH
		for i, replica := range []*api{fresh, stale} {
			st := replica.statusWith("duo", tok, cursor)
			require.Equal(t, "WAITING", st.Status)
			require.NotEmpty(t, st.Cursor)
			if last > 0 {
				require.LessOrEqual(t, st.Position, last, "round %d, replica %d: told %d after %d", round, i, st.Position, last)
			}
			if i == 0 {
				assert.Equal(t, fresh.truth(q), st.Position, "round %d: the fresh replica tells the line's position", round)
			}
			cursor, last = st.Cursor, st.Position
		}
		// Without the cursor the stale replica tells its own, larger, estimate.
		if stale.status("duo", tok).Position > last {
			staleMore++
		}
	}
	assert.Less(t, last, int64(25), "the line moved")
	assert.Positive(t, staleMore, "the stale replica alone would have told a larger position")
}

// A cursor of another token, altered, expired or not a cursor at all is
// ignored: the answer is 200 with the replica's own
// position. One signed as the apis sign it, for the token, is honoured.
func TestACursorNotOfThisTokenIsIgnored(t *testing.T) {
	e := newAPIWith(t, func(c *httpapi.Config) { c.Throttle.StatusRate = 0 }, item("solo"))
	toks, qs := e.lineUp("solo", 6)
	front, back := e.status("solo", toks[1]), e.status("solo", toks[5])
	require.Equal(t, int64(2), front.Position)
	require.Equal(t, int64(6), back.Position)

	signer := fieldmac.New(httpapi.StatusCursorKey(admissionKey))
	sign := func(tokenID string, pos, at int64) string {
		return string(signer.Append([]byte(strconv.FormatInt(pos, 10)+"."+strconv.FormatInt(at, 10)+"."),
			[]string{"solo", tokenID}, []int64{pos, at}))
	}
	now := time.Now().Unix()
	own := sign(qs[5].TokenID, 3, now)
	require.Equal(t, int64(3), e.statusWith("solo", toks[5], own).Position, "a valid cursor of the token bounds its answer")

	mac := back.Cursor[strings.LastIndexByte(back.Cursor, '.'):]
	for name, cursor := range map[string]string{
		"another token's": front.Cursor,
		"altered":         "1." + strconv.FormatInt(now, 10) + mac,
		"expired":         sign(qs[5].TokenID, 1, now-int64(time.Hour/time.Second)),
		"from the future": sign(qs[5].TokenID, 1, now+int64(time.Hour/time.Second)),
		"not a cursor":    "1.2",
		"garbage":         strings.Repeat("x", 500),
	} {
		st := e.statusWith("solo", toks[5], cursor)
		assert.Equal(t, "WAITING", st.Status, name)
		assert.Equal(t, int64(6), st.Position, "%s: the cursor was not ignored", name)
	}
}

// One replica's estimate can tell less than the line's position (holes the
// head passed are taken as spread evenly); the exact read after it never
// tells more than that estimate told.
func TestAnExactReadAfterAnEstimateNeverTellsMore(t *testing.T) {
	it := item("holes")
	it.Policy.RatePerSecond = 5
	e := newAPIWith(t, func(c *httpapi.Config) {
		c.Throttle.StatusRate = 0
		c.StatusExactEvery = 400 * time.Millisecond
	}, it)
	toks, qs := e.lineUp("holes", 20)
	for _, q := range qs[:8] { // the first 8 leave: holes at the front
		_, err := e.line.Apply(context.Background(), []queue.Op{{Kind: queue.OpLeave, ItemID: "holes", TokenID: q.TokenID,
			UserID: q.PlaceKey(), Partition: q.Partition, Offset: q.Offset + 100}})
		require.NoError(t, err)
	}
	tok, q := toks[19], qs[19]
	require.Equal(t, int64(12), e.status("holes", tok).Position) // exact: seq 20, head 0

	e.admit("holes")
	memory := e.statusReads("memory")
	est := e.status("holes", tok).Position
	require.Equal(t, memory+1, e.statusReads("memory"), "the read after the admission is an estimate")
	truth := e.truth(q)
	require.Less(t, est, truth, "the estimate tells less than the line (the holes it passed)")

	time.Sleep(450 * time.Millisecond) // past WR_STATUS_EXACT_EVERY
	exact := e.statusReads("exact")
	got := e.status("holes", tok).Position
	require.Equal(t, exact+1, e.statusReads("exact"), "the read is exact again")
	assert.LessOrEqual(t, got, est, "told %d after %d (the line says %d)", got, est, truth)
}

// A rebuild can put back in line a person admitted in the lost Redis whose
// admission was never published: the exact position of those behind grows by
// one. A poller that sends its cursor is still never told more than it was
// told before the rebuild (the seeded Sentinel run's "told 10 after 9, 0.3 s
// after a view rebuild"); without a cursor it is told the line as it is.
func TestACursorHoldsAcrossARebuildThatPutsSomeoneBack(t *testing.T) {
	it := item("solo")
	it.Policy.RatePerSecond = 1 // one admitted a tick
	e := newAPIWith(t, func(c *httpapi.Config) { c.Throttle.StatusRate = 0 }, it)
	toks, qs := e.lineUp("solo", 3)
	e.admit("solo") // the front is admitted in Redis, and the view is then lost unpublished
	told := e.statusWith("solo", toks[2], "")
	require.Equal(t, int64(2), told.Position)
	require.NotEmpty(t, told.Cursor)

	ctx := context.Background()
	require.NoError(t, e.rdb.FlushAll(ctx).Err())
	path := "/api/v1/items/solo/registrations/" + toks[2]
	require.Eventually(t, func() bool { return e.do(http.MethodGet, path, nil).Code == http.StatusServiceUnavailable },
		10*time.Second, 5*time.Millisecond, "the loss is noticed")
	for _, q := range qs { // the rebuild from the record: nobody was admitted on it
		e.apply(q)
	}
	require.NoError(t, view.SetReady(ctx, e.rdb, "after-the-loss", nil, time.Now()))
	require.Eventually(t, func() bool { return e.do(http.MethodGet, path, nil).Code == http.StatusOK }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(3), e.truth(qs[2]), "the rebuilt line has the front back")

	again := e.statusWith("solo", toks[2], told.Cursor)
	assert.Equal(t, "WAITING", again.Status)
	assert.Equal(t, int64(2), again.Position, "told a larger position after the rebuild")
	assert.Equal(t, int64(3), e.statusWith("solo", toks[2], "").Position, "no cursor: the line as it is")
}

// An admission is told once it is on waitroom.admissions (issue 24): promoted
// in Redis but not published yet, the person reads WAITING at position 1 with
// no admission token; once the scheduler's publish is acknowledged, it reads
// ADMITTED. An admission token is handed out only for a published admission
// (this status answer, or the notifier's event read from the topic, which
// often comes before the scheduler's acknowledgement), so its holder is
// verified without waiting for that acknowledgement.
func TestAdmittedToldOnlyOncePublished(t *testing.T) {
	e := newAPI(t, item("rec"))
	toks, qs := e.lineUp("rec", 2)
	e.admit("rec") // both admitted in Redis (rate 50/s), neither published
	// Twice each: the second read must not come from a cached admission.
	for i := 0; i < 2; i++ {
		for _, tok := range toks {
			st := e.status("rec", tok)
			assert.Equal(t, "WAITING", st.Status)
			assert.Equal(t, int64(1), st.Position)
			assert.Empty(t, st.AdmissionToken)
		}
	}
	admit, err := token.New(token.EdDSA, admissionKey, "a1") // the api's admission key
	require.NoError(t, err)
	adm, err := admit.IssueAdmission(token.Admission{TokenID: qs[0].TokenID, ItemID: "rec", UserID: qs[0].UserID,
		ExpiresAt: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	a := e.post("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: adm, ItemID: "rec"})
	assert.Equal(t, http.StatusOK, a.Code, "a holder told from the topic before the acknowledgement: %s", a.Body)

	e.ack("rec")
	for _, tok := range toks {
		st := e.status("rec", tok)
		assert.Equal(t, "ADMITTED", st.Status)
		assert.NotEmpty(t, st.AdmissionToken)
	}
	a = e.post("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: adm, ItemID: "rec"})
	assert.Equal(t, http.StatusOK, a.Code, "published: %s", a.Body)
}
