package stack_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/topics"
)

// 5,000 registrations for one item from 50 concurrent clients: every one is
// answered 202, every one reaches the line exactly once, and positions 1..5000
// follow the order the broker assigned.
func TestFiveThousandRegistrationsFollowBrokerOrder(t *testing.T) {
	e := newEnv(t, item("drop"))
	e.start()
	const clients, each = 50, 100
	regs := make([]token.Queue, clients*each)
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Go(func() {
			for i := 0; i < each; i++ {
				_, q := e.register("drop", fmt.Sprintf("user-%d-%d", c, i))
				regs[c*each+i] = q
			}
		})
	}
	wg.Wait()

	want := byOffset(t, regs)
	line := e.waitLine("drop", len(want))
	require.Equal(t, want, line, "the line must be the broker's order")
	seq, err := e.rdb.Get(context.Background(), queue.KeysFor("drop").Seq).Int()
	require.NoError(t, err)
	assert.Equal(t, len(want), seq, "each registration applied exactly once")

	// Status answers the exact position: check a spread of them over HTTP.
	tokens := map[string]string{}
	for _, q := range regs {
		tokens[q.TokenID], _ = e.signer.IssueQueue(q, time.Hour)
	}
	for pos := 1; pos <= len(want); pos += 97 {
		st := e.status("drop", tokens[want[pos-1]])
		assert.True(t, strings.HasPrefix(st.Cursor, strconv.Itoa(pos)+"."), "the status cursor tells the position told: %q", st.Cursor)
		assert.Equal(t, httpapi.StatusResponse{Status: "WAITING", ItemID: "drop", UserID: st.UserID, TokenID: want[pos-1],
			Position: int64(pos), WaitingTotal: int64(len(want)), PollAfterMs: registration.PollAfter(registration.Answer{
				Status: "WAITING", Position: int64(pos)}).Milliseconds(), Cursor: st.Cursor}, st)
	}
}

// Registrations for many items at once keep per-item order, and items do not
// wait for each other.
func TestManyItemsKeepTheirOwnOrder(t *testing.T) {
	const items, per, clients = 24, 60, 32
	var all []string
	var states []topics.ItemState
	for i := 0; i < items; i++ {
		all = append(all, fmt.Sprintf("item-%02d", i))
		states = append(states, item(all[i]))
	}
	e := newEnv(t, states...)
	e.start()
	var mu sync.Mutex
	regs := map[string][]token.Queue{}
	work := make(chan int)
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Go(func() {
			for n := range work {
				id := all[n%items] // interleave the items
				_, q := e.register(id, fmt.Sprintf("u%d", n))
				mu.Lock()
				regs[id] = append(regs[id], q)
				mu.Unlock()
			}
		})
	}
	for n := 0; n < items*per; n++ {
		work <- n
	}
	close(work)
	wg.Wait()
	parts := map[int32]bool{}
	for _, id := range all {
		want := byOffset(t, regs[id])
		parts[regs[id][0].Partition] = true
		assert.Equal(t, want, e.waitLine(id, per), "order of %s", id)
	}
	assert.Greater(t, len(parts), 4, "items should spread over partitions")
}

// A typed userId is a label: registering twice with it makes two places,
// each read and left only through its own token; leaving then registering
// again goes to the back.
func TestRepeatRegistrationAndLeave(t *testing.T) {
	e := newEnv(t, item("shoes"))
	e.start()
	a1, _ := e.register("shoes", "alice")
	e.register("shoes", "bob")
	a2, _ := e.register("shoes", "alice") // a second tab
	e.register("shoes", "carol")
	line := e.waitLine("shoes", 4)
	require.Len(t, line, 4)
	assert.Equal(t, []string{a1.TokenID, a2.TokenID}, []string{line[0], line[2]})

	// Each of alice's tokens shows its own place.
	for i, r := range []httpapi.RegisterResponse{a1, a2} {
		st := e.status("shoes", r.Token)
		assert.Equal(t, "WAITING", st.Status)
		assert.Equal(t, int64(2*i+1), st.Position)
		assert.Equal(t, r.TokenID, st.TokenID)
	}

	bob, carol := line[1], line[3]
	a := e.do(http.MethodDelete, "/api/v1/items/shoes/registrations/"+a2.Token, nil)
	require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
	require.Eventually(t, func() bool { return e.status("shoes", a2.Token).Status == "LEFT" }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{a1.TokenID, bob, carol}, e.waitLine("shoes", 3), "the second tab's leave leaves only its own place")
	a = e.do(http.MethodDelete, "/api/v1/items/shoes/registrations/"+a1.Token, nil)
	require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
	require.Eventually(t, func() bool { return e.status("shoes", a1.Token).Status == "LEFT" }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{bob, carol}, e.waitLine("shoes", 2))

	a3, _ := e.register("shoes", "alice")
	assert.Equal(t, []string{bob, carol, a3.TokenID}, e.waitLine("shoes", 3), "back of the line after leaving")
	st := e.status("shoes", a3.Token)
	assert.Equal(t, int64(3), st.Position)
	assert.Equal(t, int64(3), st.WaitingTotal)
}
