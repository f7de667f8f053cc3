package stack_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/redisclient"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
)

// Every service reaches Redis through a Sentinel (WR_REDIS_MODE=sentinel);
// the primary is killed (SIGKILL, by its PID) under a line with waiting,
// admitted, left and completed people while registrations keep coming. The
// Sentinel promotes the replica and the line survives: no status answers a
// wrong state (503 meanwhile), every token reads as before, the registrations
// made during the failover queue behind everyone in Kafka's order. Writes the
// replica had not received yet make its view older than the record: the
// marker says so and the consumer rebuilds it from Kafka (the test logs
// whether it did).
func TestLineSurvivesSentinelFailover(t *testing.T) { sentinelFailover(t, false) }

// The same with the replica cut off while the primary takes
// writes and is killed: the promoted replica lacks them, readers that saw
// them refuse its older view (503 VIEW_REBUILDING, never a wrong answer) and
// the consumer rebuilds it from Kafka.
func TestLineSurvivesSentinelFailoverWithLostWrites(t *testing.T) { sentinelFailover(t, true) }

func sentinelFailover(t *testing.T, lag bool) {
	if testenv.ClusterMode() {
		t.Skip("a Sentinel of its own whatever WR_TEST_REDIS says: once, in the single-Redis run")
	}
	s := testenv.StartSentinel(t)
	rdb := s.Client()
	e := newEnvOn(t, nil, s.Config(), rdb, rebuildEnvItem())
	e.start()
	ctx := context.Background()
	var genBefore string
	lineScenarioOf(t, e, func() {
		m, ok, err := view.Read(ctx, rdb)
		require.NoError(t, err)
		require.True(t, ok)
		genBefore = m.Gen
	}, func() {
		if lag {
			// Cut the replica off: a password it does not know, its link
			// killed. Open connections (the services', the Sentinel's) keep
			// working, so registrations and admissions go on without it.
			pc := redis.NewClient(&redis.Options{Addr: s.Primary.Addr})
			defer pc.Close()
			require.NoError(t, pc.ConfigSet(ctx, "requirepass", "cut-off").Err())
			require.NoError(t, pc.ClientKillByFilter(ctx, "TYPE", "replica").Err())
			time.Sleep(700 * time.Millisecond)
		}
		killed := s.Primary.PID()
		s.Primary.Stop() // SIGKILL
		require.Eventually(t, func() bool {
			a, err := s.PrimaryAddr(ctx)
			return err == nil && a == s.Replica.Addr
		}, 30*time.Second, 50*time.Millisecond, "the Sentinel promotes the replica")
		t.Logf("primary (pid %d) killed; the Sentinel promoted %s", killed, s.Replica.Addr)
	}, lag)
	m, ok, err := view.Read(ctx, rdb)
	require.NoError(t, err)
	require.True(t, ok)
	t.Logf("view generation before %q, after %q (rebuilt: %v)", genBefore, m.Gen, m.Gen != genBefore)
	if lag {
		require.NotEqual(t, genBefore, m.Gen, "the view that lost writes was rebuilt")
	}
}

// Every service reaches a Redis that speaks TLS only and knows one ACL user
// (WR_REDIS_TLS, WR_REDIS_TLS_CA_FILE, WR_REDIS_USERNAME, WR_REDIS_PASSWORD;
// the default user is off): registrations are placed in order and read back.
func TestStackOnTLSRedisWithAnACLUser(t *testing.T) {
	if testenv.ClusterMode() {
		t.Skip("a TLS redis-server of its own whatever WR_TEST_REDIS says: once, in the single-Redis run")
	}
	cfg, srv := testenv.SecureRedis(t)
	rdb, err := redisclient.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	e := newEnvOn(t, srv, cfg, rdb, item("tls"))
	e.start()
	var toks []string
	for _, u := range []string{"ann", "ben", "cat"} {
		r, _ := e.register("tls", u)
		toks = append(toks, r.TokenID)
	}
	require.Equal(t, toks, e.waitLine("tls", 3))
}
