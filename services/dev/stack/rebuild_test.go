package stack_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/redisview/snapshot"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/services/dev/stack"
	"github.com/waitroom/waitroom/topics"
)

// seen is what a status answer says that a rebuild must restore exactly.
type seen struct {
	Status    string
	Position  int64
	ExpiresAt string
}

func (e *env) seen(item, tok string) (seen, int) {
	a := e.do(http.MethodGet, "/api/v1/items/"+item+"/registrations/"+tok, nil)
	if a.Code != http.StatusOK {
		return seen{}, a.Code
	}
	var s httpapi.StatusResponse
	a.decode(e.t, &s)
	return seen{s.Status, s.Position, s.ExpiresAt}, a.Code
}

// lineScenario builds a line with waiting, admitted, left and completed
// people, snapshots every status, loses the view with lose (registrations
// keep coming meanwhile), and proves: no status ever answered a wrong state
// (503 is fine), every token reads exactly as before within a bounded time,
// and the registrations made during the loss are in the line after everyone
// who came before. before, when set, runs once the first 40 are placed (an
// RDB snapshot taken then is older than the record afterwards).
func lineScenario(t *testing.T, e *env, before, lose func()) {
	lineScenarioOf(t, e, before, lose, true)
}

// lineScenarioOf is lineScenario; mustRefuse false accepts a loss no reader
// noticed (a failover to a replica that had every write), the answers still
// checked exact throughout.
func lineScenarioOf(t *testing.T, e *env, before, lose func(), mustRefuse bool) {
	const item = "show"
	ctx := context.Background()
	regs := make([]httpapi.RegisterResponse, 40)
	for i := range regs {
		regs[i], _ = e.register(item, fmt.Sprintf("u%02d", i))
	}
	line := queue.New(e.rdb)
	stable := func(waiting, admitted int64) func() bool {
		return func() bool {
			st, err := line.Stats(ctx, item)
			return err == nil && st.Waiting == waiting && st.Admitted == admitted
		}
	}
	require.Eventually(t, stable(30, 10), 30*time.Second, 20*time.Millisecond, "10 admitted (maxActive), 30 waiting")
	if before != nil {
		before()
	}

	for _, i := range []int{0, 1} { // two admitted people complete
		st := e.admitted(item, regs[i].Token)
		a := e.admissionCall("/api/v1/admissions/complete", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: item})
		require.Equal(t, http.StatusOK, a.Code, "%s", a.Body)
	}
	for _, i := range []int{2, 20, 21} { // one admitted and two waiting people leave
		a := e.do(http.MethodDelete, "/api/v1/items/"+item+"/registrations/"+regs[i].Token, nil)
		require.Equal(t, http.StatusAccepted, a.Code, "%s", a.Body)
	}
	// Three places freed: u10..u12 are admitted; 25 wait.
	require.Eventually(t, stable(25, 10), 30*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		s, _ := e.seen(item, regs[21].Token)
		return s.Status == "LEFT"
	}, 30*time.Second, 20*time.Millisecond)

	want := make([]seen, len(regs))
	count := map[string]int{}
	for i, r := range regs {
		var code int
		want[i], code = e.seen(item, r.Token)
		require.Equal(t, http.StatusOK, code)
		count[want[i].Status]++
	}
	require.Equal(t, map[string]int{"WAITING": 25, "ADMITTED": 10, "LEFT": 3, "COMPLETED": 2}, count)

	// Registrations keep coming while the view is lost and rebuilt.
	var mu sync.Mutex
	var late []token.Queue
	stopLate := make(chan struct{})
	lateDone := make(chan struct{})
	go func() {
		defer close(lateDone)
		for i := 0; ; i++ {
			select {
			case <-stopLate:
				return
			case <-time.After(30 * time.Millisecond):
			}
			_, q := e.register(item, fmt.Sprintf("late%03d", i))
			mu.Lock()
			late = append(late, q)
			mu.Unlock()
		}
	}()

	start := time.Now()
	lose()
	refused := 0
	var firstRefusal time.Duration
	require.Eventually(t, func() bool {
		all := true
		for i, r := range regs {
			got, code := e.seen(item, r.Token)
			if code != http.StatusOK {
				require.Contains(t, []int{http.StatusServiceUnavailable}, code, "token %d", i)
				if refused == 0 {
					firstRefusal = time.Since(start)
				}
				refused++
				all = false
				continue
			}
			require.Equal(t, want[i], got, "token %d (u%02d) answered a wrong state after the loss", i, i)
		}
		return all && (refused > 0 || !mustRefuse)
	}, 60*time.Second, 10*time.Millisecond, "every token reads as before")
	t.Logf("first refusal %s after the loss, view back after %s (%d answers refused meanwhile)",
		firstRefusal.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), refused)
	close(stopLate)
	<-lateDone

	// Everyone who registered during the loss is in the line, behind the 25
	// who were waiting, in the order Kafka took them.
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, late)
	require.Eventually(t, stable(int64(25+len(late)), 10), 30*time.Second, 20*time.Millisecond)
	ids, err := line.Waiting(ctx, item, 0)
	require.NoError(t, err)
	assert.Equal(t, byOffset(t, late), ids[25:], "the late registrations queue behind everyone already there")
	m, ok, err := view.Read(ctx, e.rdb)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, view.Ready, m.State)
}

func rebuildEnv(t *testing.T) *env { return newEnv(t, rebuildEnvItem()) }

// rebuildEnvItem is the item of lineScenario: admits 10 at once, holds them.
func rebuildEnvItem() topics.ItemState {
	return topics.ItemState{ItemID: "show", Name: "Show", Stock: topics.Unlimited, Enabled: true,
		Policy: topics.AdmissionPolicy{RatePerSecond: 1000, MaxActive: 10, SessionTTLSeconds: 600}, Version: 1, UpdatedAt: 1}
}

func TestRebuildAfterFlushAll(t *testing.T) {
	e := rebuildEnv(t)
	e.start()
	lineScenario(t, e, nil, e.flushAll)
}

func TestRebuildAfterRedisKilledAndRestartedEmpty(t *testing.T) {
	// On a cluster a node restarted empty loses only its slots' items:
	// nodeloss_test.go (each item's own marker).
	needSingleRedis(t, "one server restarted")
	e := rebuildEnv(t)
	e.start()
	lineScenario(t, e, nil, func() {
		e.redis.Stop() // SIGKILL, no persistence
		e.redis.Start()
	})
}

func TestRebuildAfterRestoreOfAnOlderSnapshot(t *testing.T) {
	needSingleRedis(t, "restores one server's RDB snapshot")
	e := rebuildEnv(t)
	e.redis.Stop()
	e.redis.Dir = t.TempDir()
	e.redis.Start()
	e.start()
	lineScenario(t, e,
		func() { require.NoError(t, e.rdb.Save(context.Background()).Err()) }, // a ready view, older than what follows
		func() {
			e.redis.Stop()
			e.redis.Start() // loads dump.rdb: the marker says ready, its offsets are behind the record
		})
}

// The consumer writes a snapshot of the line every WR_SNAPSHOT_INTERVAL; the
// view lost after one is rebuilt from it and the records after it, exactly.
func TestRebuildAfterFlushAllFromTheConsumersSnapshot(t *testing.T) {
	e := rebuildEnv(t)
	e.startWith(func(o *stack.Options) { o.SnapshotInterval = 300 * time.Millisecond })
	lineScenario(t, e, func() {
		require.Eventually(t, func() bool {
			l := snapshot.NewLatest()
			for _, r := range records(t, e, topics.Snapshots) {
				l.Add(r)
			}
			s, _ := l.Complete(func(item string) bool { return item == "show" })
			return s["show"] != nil && s["show"].Head.Entries >= 40
		}, 20*time.Second, 100*time.Millisecond, "the consumer snapshots the line of 40")
	}, e.flushAll)
}
