package rebuild_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// loseAnswer is a connection to Redis that loses the answer to the first
// command written through any of them that contains mark, once Redis ran
// it: it reads the answer, closes the connection and reports io.EOF, as a
// link reset between the answer and the client does.
type loseAnswer struct {
	net.Conn
	mark  []byte
	armed *atomic.Bool // shared: only one command's answer is lost
	lose  bool
}

func (c *loseAnswer) Write(p []byte) (int, error) {
	if bytes.Contains(p, c.mark) && c.armed.CompareAndSwap(true, false) {
		c.lose = true
	}
	return c.Conn.Write(p)
}

func (c *loseAnswer) Read(p []byte) (int, error) {
	if !c.lose {
		return c.Conn.Read(p)
	}
	if _, err := c.Conn.Read(p); err != nil { // Redis ran the command
		return 0, err
	}
	_ = c.Conn.Close()
	return 0, io.EOF
}

// TestRebuildKeepsALockItsRetryFindsTaken: the client retries the lock's
// SET when its answer is lost (io.EOF is retried), and the retry finds the
// lock taken, by the first try. The rebuild goes on with it: an ErrLocked
// there left a lock no one renews, and every consumer waited for its TTL
// (30 s) with the view answering VIEW_REBUILDING (a link reset of the
// nemesis did it in TestRebuildThroughLinkFaults).
func TestRebuildKeepsALockItsRetryFindsTaken(t *testing.T) {
	w := newWorld(t)
	w.item("lock", 10, 60)
	w.reg(topics.KindRegister, "lock", "u1", "t1")
	var armed atomic.Bool
	armed.Store(true)
	// The same Redis (a single server, or the cluster with WR_TEST_REDIS=cluster)
	// through connections that lose the lock's answer.
	o := &redis.UniversalOptions{Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &loseAnswer{Conn: c, mark: []byte(view.LockKey), armed: &armed}, nil
	}}
	switch c := w.rdb.(type) {
	case *redis.Client:
		o.Addrs = []string{c.Options().Addr}
	case *redis.ClusterClient:
		o.Addrs, o.IsClusterMode = c.Options().Addrs, true
	default:
		t.Fatalf("a Redis client of type %T", w.rdb)
	}
	rdb := redis.NewUniversalClient(o)
	t.Cleanup(func() { _ = rdb.Close() })
	rep, err := rebuild.New(rdb, w.base, zap.NewNop()).Run(w.ctx, rebuild.Options{Settle: time.Millisecond})
	if armed.Load() {
		t.Fatal("no answer was lost: the test did not test the retry")
	}
	if err != nil {
		t.Fatalf("rebuild after its lock's answer was lost: %v", err)
	}
	if rep.Waiting != 1 {
		t.Fatalf("rebuilt %d waiting, want 1", rep.Waiting)
	}
	if n, err := w.rdb.Exists(w.ctx, view.LockKey).Result(); err != nil || n != 0 {
		t.Fatalf("the lock after the rebuild: %d %v, want released", n, err)
	}
}
