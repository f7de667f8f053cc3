package stack_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/services/api/pow"
	"github.com/waitroom/waitroom/topics"
)

// registerWith posts body to item's register route.
func (e *env) registerWith(item string, body map[string]any) answer {
	e.t.Helper()
	b, err := json.Marshal(body)
	require.NoError(e.t, err)
	return e.do(http.MethodPost, "/api/v1/items/"+item+"/registrations", b, "Content-Type", "application/json")
}

// issueBypass asks a scheduler's admin API for a code.
func (e *env) issueBypass(item string, count int) string {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.stack.SchedulerURLs[0]+"/internal/admin/v1/items/"+item+"/bypass",
		jsonBody(`{"count":`+itoa(count)+`,"ttlSeconds":3600}`))
	require.NoError(e.t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := e.http.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	require.Equal(e.t, http.StatusOK, resp.StatusCode)
	var out struct{ Code string }
	require.NoError(e.t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Code
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// The whole path of a proof-of-work item and of bypass codes: api over HTTP,
// the consumer, the schedulers (3 replicas, one leading), real Redis, kfake.
//
// Proof-of-work: a registration without it is refused with a challenge; the
// solved challenge is placed and admitted; the same challenge again is refused.
//
// Bypass: on an item that admits nobody (rate 0) and asks a proof-of-work, a
// code of count 2 admits two staff at the next tick, ahead of three waiting
// fans who keep their places (the head does not move); the same staff member
// again is the same place; a third use is refused; the admissions are on
// waitroom.admissions like any other; a code of count 1 raced by four
// registrations admits exactly one.
func TestGuardEndToEnd(t *testing.T) {
	drop := policy("drop", 50, 0, 60)
	drop.PowDifficulty = 12
	gala := item("gala") // rate 0: nobody is admitted from the line
	gala.PowDifficulty = 12
	e := newEnv(t, drop, gala)
	e.start()

	t.Run("proof-of-work", func(t *testing.T) {
		a := e.registerWith("drop", map[string]any{"userId": "fan"})
		require.Equal(t, http.StatusForbidden, a.Code, "%s", a.Body)
		var req struct {
			Error struct{ Code string }
			Pow   httpapi.ChallengeResponse
		}
		a.decode(t, &req)
		require.Equal(t, "POW_REQUIRED", req.Error.Code)
		x, ok := pow.Solve(req.Pow.Challenge, req.Pow.Difficulty, 1<<26)
		require.True(t, ok)
		proof := map[string]string{"challenge": req.Pow.Challenge, "solution": x}
		a = e.registerWith("drop", map[string]any{"userId": "fan", "pow": proof})
		require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
		var r httpapi.RegisterResponse
		a.decode(t, &r)
		e.waitStatus("drop", r.Token, "ADMITTED")
		a = e.registerWith("drop", map[string]any{"userId": "bot", "pow": proof})
		require.Equal(t, http.StatusConflict, a.Code, "%s", a.Body)
		assert.Equal(t, "POW_REUSED", errCode(t, a))
	})

	t.Run("bypass", func(t *testing.T) {
		var fans []string
		for _, u := range []string{"fan-1", "fan-2", "fan-3"} {
			var ch httpapi.ChallengeResponse
			e.do(http.MethodGet, "/api/v1/items/gala/challenge", nil).decode(t, &ch)
			x, _ := pow.Solve(ch.Challenge, ch.Difficulty, 1<<26)
			a := e.registerWith("gala", map[string]any{"userId": u, "pow": map[string]string{"challenge": ch.Challenge, "solution": x}})
			require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
			var r httpapi.RegisterResponse
			a.decode(t, &r)
			fans = append(fans, r.Token)
		}
		for i, tok := range fans {
			require.Equal(t, int64(i+1), e.waitStatus("gala", tok, "WAITING").Position)
		}

		code := e.issueBypass("gala", 2)
		var staff []httpapi.RegisterResponse
		for _, u := range []string{"staff-1", "staff-2"} {
			a := e.registerWith("gala", map[string]any{"userId": u, "bypass": code})
			require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
			var r httpapi.RegisterResponse
			a.decode(t, &r)
			staff = append(staff, r)
			e.waitStatus("gala", r.Token, "ADMITTED")
		}
		a := e.registerWith("gala", map[string]any{"userId": "staff-3", "bypass": code})
		require.Equal(t, http.StatusForbidden, a.Code, "%s", a.Body)
		assert.Equal(t, "BYPASS_EXHAUSTED", errCode(t, a))

		// The fans did not move, and the head did not either.
		for i, tok := range fans {
			st := e.status("gala", tok)
			assert.Equal(t, "WAITING", st.Status)
			assert.Equal(t, int64(i+1), st.Position)
		}
		stats, err := queue.New(e.rdb).Stats(context.Background(), "gala")
		require.NoError(t, err)
		assert.Equal(t, int64(0), stats.Head)
		assert.Equal(t, int64(2), stats.Admitted)
		uses, err := queue.New(e.rdb).BypassUsesAll(context.Background(), "gala")
		require.NoError(t, err)
		require.Len(t, uses, 1)
		for _, n := range uses {
			assert.Equal(t, int64(2), n)
		}

		// The admissions are on the record.
		admitted := e.admittedOnTopic(t, "gala", 2)
		assert.ElementsMatch(t, []string{staff[0].TokenID, staff[1].TokenID}, admitted)

		// Four registrations race one use: exactly one is admitted; the
		// others are refused at the door or applied and never placed.
		one := e.issueBypass("gala", 1)
		var wg sync.WaitGroup
		res := make([]answer, 4)
		for i := range res {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, _ := json.Marshal(map[string]any{"userId": "racer-" + itoa(i), "bypass": one})
				res[i] = e.doNoFail(http.MethodPost, "/api/v1/items/gala/registrations", b)
			}()
		}
		wg.Wait()
		got := map[string]int{}
		for _, a := range res {
			if a.Code == http.StatusForbidden {
				require.Equal(t, "BYPASS_EXHAUSTED", errCode(t, a))
				got["refused"]++
				continue
			}
			require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
			var r httpapi.RegisterResponse
			a.decode(t, &r)
			st := e.waitNotPending("gala", r.Token)
			if st.Status == "WAITING" {
				st = e.waitStatus("gala", r.Token, "ADMITTED")
			}
			got[st.Status]++
		}
		assert.Equal(t, 1, got["ADMITTED"], "%v", got)
		assert.Equal(t, 3, got["refused"]+got["REJECTED"], "%v", got)
	})
}

// doNoFail is do from any goroutine (no require inside).
func (e *env) doNoFail(method, path string, body []byte) answer {
	req, err := http.NewRequest(method, e.stack.APIURL+path, jsonBody(string(body)))
	if err != nil {
		return answer{}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Do(req)
	if err != nil {
		return answer{}
	}
	defer resp.Body.Close()
	buf, _ := io.ReadAll(resp.Body)
	return answer{Code: resp.StatusCode, Body: buf}
}

// admittedOnTopic reads waitroom.admissions until it has seen n tokens of item.
func (e *env) admittedOnTopic(t *testing.T, item string, n int) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(topics.Admissions), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []string
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "admissions of %s on the topic: %v", item, out)
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := topics.DecodeAdmission(r.Value)
			if err != nil || ev.ItemID != item {
				return
			}
			for _, tok := range ev.Admitted {
				if !slices.Contains(out, tok) {
					out = append(out, tok)
				}
			}
		})
	}
	return out
}
