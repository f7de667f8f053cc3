package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// statusReads is the api's count of status reads answered from source.
func (s *api) statusReads(source string) int {
	s.t.Helper()
	m := regexp.MustCompile(`waitroom_api_status_reads_total\{source="` + source + `"\} (\d+)`).FindSubmatch(s.do(http.MethodGet, "/metrics", nil).Body)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(string(m[1]))
	require.NoError(s.t, err)
	return n
}

// Repeated reads of a waiting registration are answered from memory, moved
// by the item's head, and say what an exact read says; once the head reaches
// the token the read is exact again (ADMITTED).
func TestStatusFromMemoryIsExact(t *testing.T) {
	it := item("slow")
	it.Policy.RatePerSecond = 5
	e := newAPI(t, it)
	var toks []string
	for i := 0; i < 30; i++ {
		r, q := e.register("slow", fmt.Sprintf("user-%d", i))
		e.apply(q)
		toks = append(toks, r.Token)
	}
	tracked := []string{toks[8], toks[20]}
	for i, tok := range tracked {
		st := e.status("slow", tok)
		require.Equal(t, "WAITING", st.Status)
		require.Equal(t, []int64{9, 21}[i], st.Position)
		assert.Equal(t, int64(1000), st.PollAfterMs)
	}
	memoryBefore := e.statusReads("memory")

	admitted := 0
	for k := 0; k < 8; k++ {
		e.admit("slow")
		e.ack("slow")
		time.Sleep(300 * time.Millisecond) // past WR_STATUS_MOTION_FRESH
		for _, tok := range tracked {
			got := e.status("slow", tok)
			q, err := e.signer.ParseQueue(tok)
			require.NoError(t, err)
			want, err := e.line.Status(context.Background(), "slow", q.PlaceKey(), q.TokenID, q.Partition, q.Offset)
			require.NoError(t, err)
			if want.State != line.Waiting {
				assert.Equal(t, "ADMITTED", got.Status)
				admitted++
				continue
			}
			assert.Equal(t, "WAITING", got.Status)
			assert.Equal(t, want.Position, got.Position, "after %d ticks", k+1)
			assert.Equal(t, want.WaitingTotal, got.WaitingTotal)
		}
	}
	assert.Positive(t, admitted, "the head reached the first token")
	assert.Greater(t, e.statusReads("memory")-memoryBefore, 5, "reads answered from memory")
}

// The answer tells a client when to read again: Retry-After and pollAfterMs,
// longer far back.
func TestStatusTellsWhenToPollAgain(t *testing.T) {
	e := newAPI(t, item("far"))
	r, q := e.register("far", "alice")
	e.apply(q)
	a := e.do(http.MethodGet, "/api/v1/items/far/registrations/"+r.Token, nil)
	require.Equal(t, http.StatusOK, a.Code)
	assert.Equal(t, "1", a.Header.Get("Retry-After"))
	var st struct{ PollAfterMs int64 }
	a.decode(t, &st)
	assert.Equal(t, int64(1000), st.PollAfterMs)
}

// A leave through this replica is never hidden by an answer from memory: the
// reads before the consumer applied it are exact (WAITING), and the first
// after says LEFT.
func TestLeaveIsNotAnsweredFromMemory(t *testing.T) {
	e := newAPI(t, item("gone"))
	r, q := e.register("gone", "alice")
	e.apply(q)
	require.Equal(t, "WAITING", e.status("gone", r.Token).Status)
	memory := e.statusReads("memory")
	require.Equal(t, "WAITING", e.status("gone", r.Token).Status)
	require.Equal(t, memory+1, e.statusReads("memory"), "the second read came from memory")

	a := e.do(http.MethodDelete, "/api/v1/items/gone/registrations/"+r.Token, nil)
	require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
	assert.Equal(t, "WAITING", e.status("gone", r.Token).Status, "the leave is not applied yet")
	_, err := e.line.Apply(context.Background(), []queue.Op{{Kind: queue.OpLeave, ItemID: "gone", TokenID: q.TokenID,
		UserID: q.PlaceKey(), Partition: q.Partition, Offset: q.Offset + 1}})
	require.NoError(t, err)
	assert.Equal(t, "LEFT", e.status("gone", r.Token).Status)
	assert.Equal(t, memory+1, e.statusReads("memory"), "no read after the leave came from memory")
}
