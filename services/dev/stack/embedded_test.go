package stack_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/services/dev/stack"
	"go.uber.org/zap/zaptest"
)

// The embedded default of `make run`: kfake keeping its log in a data dir and
// an in-memory Redis (miniredis). Everything in Redis is lost with the
// process; on the next start the consumer rebuilds the line from Kafka, so
// every registration answered 202 is in the line again, in order.
func TestEmbeddedRestartKeepsEveryRegistration(t *testing.T) {
	if testenv.ClusterMode() {
		t.Skip("runs on miniredis whatever WR_TEST_REDIS says: once, in the single-Redis run")
	}
	dir := t.TempDir()
	run := func(fn func(e *env)) {
		kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(dir))
		require.NoError(t, err)
		defer kafka.Close()
		require.NoError(t, testenv.EnsureTopics(kafka.ListenAddrs(), 12))
		mr := miniredis.NewMiniRedis()
		require.NoError(t, mr.Start())
		defer mr.Close() // the in-memory view dies with the process
		e := &env{t: t, brokers: kafka.ListenAddrs(), rdb: redis.NewClient(&redis.Options{Addr: mr.Addr()}),
			http: &http.Client{Timeout: 10 * time.Second}}
		defer e.rdb.Close()
		e.signer, err = token.New(token.HS256, testKey, "k1")
		require.NoError(t, err)
		e.kcl, err = kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ProducerLinger(0))
		require.NoError(t, err)
		defer e.kcl.Close()
		require.NoError(t, stack.PublishItems(context.Background(), e.kcl, item("emb")))
		s, err := stack.Start(context.Background(), stack.Options{Brokers: e.brokers, RedisAddr: mr.Addr(), TokenKey: testKey,
			AdminToken: adminToken, Tick: 100 * time.Millisecond, Log: zaptest.NewLogger(t).Named("stack")})
		require.NoError(t, err)
		e.stack = s
		defer func() { require.NoError(t, s.Stop()) }()
		fn(e)
	}
	var tokens []string
	run(func(e *env) {
		for i := range 50 {
			r, _ := e.register("emb", fmt.Sprintf("u%02d", i))
			tokens = append(tokens, r.Token)
		}
		e.waitLine("emb", 50)
	})
	run(func(e *env) {
		for i, tok := range tokens {
			st := e.status("emb", tok)
			require.Equal(t, "WAITING", st.Status, "token %d", i)
			require.Equal(t, int64(i+1), st.Position, "token %d", i)
		}
	})
}
