package stack_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/kit/go/waitroomkit"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/services/dev/stack"
)

// The operator's off switch reaches a protected site with the room's Kafka
// and Redis stopped: the site's kit reads the signed flag from a file, so
// switching an item to "paused" shows everyone the paused page and to
// "through" lets everyone in, within a second, while nothing of the room
// answers but its cached keys.
func TestKitOffSwitchWithKafkaAndRedisStopped(t *testing.T) {
	needSingleRedis(t, "stops the redis-server")
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(kafka.Close)
	require.NoError(t, testenv.EnsureTopics(kafka.ListenAddrs(), 12))
	srv := testenv.StartRedis(t)
	e := &env{t: t, brokers: kafka.ListenAddrs(), redis: srv, rcfg: config.Redis{Addr: srv.Addr}, rdb: srv.Client()}
	e.kcl, err = kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ProducerLinger(0))
	require.NoError(t, err)
	t.Cleanup(e.kcl.Close)
	e.signer, err = token.New(token.HS256, testKey, "k1")
	require.NoError(t, err)
	e.http = &http.Client{Timeout: 10 * time.Second}
	require.NoError(t, stack.PublishItems(context.Background(), e.kcl, policy("tix", 50, 10, 60)))
	e.start()

	pub, key, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	flag := filepath.Join(t.TempDir(), "waitroom-flag.jws")
	write := func(off string) {
		s, err := waitroomkit.SignFlag(key, waitroomkit.Flag{IssuedAt: time.Now(), Items: map[string]waitroomkit.ItemFlag{"tix": {Off: off}}})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(flag, []byte(s), 0o644))
	}
	write("")
	kit, err := waitroomkit.New(e.stack.APIURL, waitroomkit.WithFlag(flag, pub, 100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = kit.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, kit.Refresh(ctx), "the api's keys, cached")
	require.NoError(t, kit.RefreshFlag(ctx))
	kit.Start(ctx)
	site := httptest.NewServer(kit.Protect(waitroomkit.Item("tix"))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := waitroomkit.FromContext(r.Context())
		_, _ = io.WriteString(w, a.UserID+a.Unchecked)
	})))
	t.Cleanup(site.Close)
	noRedirect := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(bearer string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, site.URL+"/shop/tix", nil)
		require.NoError(t, err)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	alice := e.admit("tix", "alice")
	code, body := get(alice)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "alice", body)
	code, _ = get("")
	require.Equal(t, http.StatusSeeOther, code, "no token: to the waiting page")

	// The room's stores stop.
	srv.Stop()
	kafka.Close()
	_, err = e.rdb.Ping(ctx).Result()
	require.Error(t, err, "Redis is down")
	_, err = net.DialTimeout("tcp", e.brokers[0], time.Second)
	require.Error(t, err, "Kafka is down")

	write(waitroomkit.OffPaused)
	start := time.Now()
	require.Eventually(t, func() bool {
		code, body := get(alice)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "The sale is paused")
	}, 5*time.Second, 20*time.Millisecond, "paused: even an admitted visitor sees the paused page")
	t.Logf("paused after %s", time.Since(start).Round(time.Millisecond))
	write(waitroomkit.OffThrough)
	require.Eventually(t, func() bool {
		code, body := get("")
		return code == http.StatusOK && body == waitroomkit.UncheckedOff
	}, 5*time.Second, 20*time.Millisecond, "through: a visitor without a token goes straight in")
}
