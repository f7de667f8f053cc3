package view_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"go.uber.org/zap"
)

// replicaOf starts a redis-server replicating primary and waits until it
// holds primary's marker.
func replicaOf(t *testing.T, ctx context.Context, primary *testenv.RedisServer) *redis.Client {
	t.Helper()
	r := testenv.StartRedis(t).Client()
	host, port, _ := strings.Cut(primary.Addr, ":")
	if err := r.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	inSync(t, ctx, primary.Client(), r)
	return r
}

// inSync waits until replica holds the marker primary holds now.
func inSync(t *testing.T, ctx context.Context, primary, replica *redis.Client) {
	t.Helper()
	want := primary.HGetAll(ctx, view.MarkerKey).Val()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := replica.HGetAll(ctx, view.MarkerKey).Val()
		if len(got) > 0 && got["gen"] == want["gen"] && got["state"] == want["state"] && got["node"] == want["node"] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica never caught up: %v, want %v", got, want)
		}
	}
}

// following is a client of whichever server addr names, as a Sentinel
// failover client follows the primary.
func following(t *testing.T, addr *atomic.Pointer[string]) *redis.Client {
	c := redis.NewClient(&redis.Options{Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, *addr.Load())
	}})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A replica promoted (REPLICAOF NO ONE, what a Sentinel does) holds the
// same keys, counts and all, yet is another dataset: its view is not
// trusted (nor confirmed by a scheduler about to tick), it is marked stale
// once, and the rebuild's SetReady on it arms the check with its own node,
// after which it is trusted. The primary's first replica (a new replication
// ID for the same dataset) is not a change.
func TestAPromotedReplicaIsAChangeOfNode(t *testing.T) {
	if testenv.ClusterMode() {
		t.Skip("a primary and a replica of its own: once, in the single-Redis run")
	}
	ctx := context.Background()
	a := testenv.StartRedis(t)
	if err := view.SetReady(ctx, a.Client(), "g1", map[string]int64{"t/0": 3}, time.Now()); err != nil {
		t.Fatal(err)
	}
	var addr atomic.Pointer[string]
	addr.Store(&a.Addr)
	c := following(t, &addr)
	w := view.NewWatcher(c, view.Options{}, nil, zap.NewNop())
	if s := w.Check(ctx); !s.Trusted {
		t.Fatalf("ready: %+v", s)
	}
	before, _ := view.NodeID(ctx, c)
	b := replicaOf(t, ctx, a)
	after, _ := view.NodeID(ctx, c)
	if before == after {
		t.Fatalf("the first replica did not change the primary's replication ID (%s): the case below is not shown", after)
	}
	if s := w.Check(ctx); !s.Trusted {
		t.Fatalf("the primary's first replica: %+v, want trusted", s)
	}
	if got := c.HGet(ctx, view.MarkerKey, "node").Val(); got != after {
		t.Fatalf("marker node %q, want the primary's new ID %q", got, after)
	}
	if err := w.Confirm(ctx); err != nil {
		t.Fatalf("confirm on the primary: %v", err)
	}
	inSync(t, ctx, a.Client(), b)

	a.Stop()
	if err := b.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	addr.Store(&b.Options().Addr)
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = w.Confirm(ctx); errors.Is(err, view.ErrNotTrusted) {
			break
		}
	}
	if !errors.Is(err, view.ErrNotTrusted) {
		t.Fatalf("confirm on the promoted replica = %v, want ErrNotTrusted", err)
	}
	s := w.Check(ctx)
	if s.Trusted || s.Cause != "behind" || !strings.Contains(s.Reason, "node holding the view changed") {
		t.Fatalf("promoted: %+v, want not trusted (behind, node changed)", s)
	}
	if st := b.HGet(ctx, view.MarkerKey, "state").Val(); st != "stale" {
		t.Fatalf("marker state %q, want stale", st)
	}
	// Another service finding the same change later marks nothing again.
	w2 := view.NewWatcher(b, view.Options{}, nil, zap.NewNop())
	if s := w2.Check(ctx); s.Trusted || s.Cause != "rebuilding" {
		t.Fatalf("second watcher: %+v, want rebuilding", s)
	}

	// The rebuild on the new primary.
	if err := view.SetRebuilding(ctx, c, "g2", s.Reason); err != nil {
		t.Fatal(err)
	}
	if err := view.SetReady(ctx, c, "g2", map[string]int64{"t/0": 3}, time.Now()); err != nil {
		t.Fatal(err)
	}
	node, err := view.NodeID(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.HGet(ctx, view.MarkerKey, "node").Val(); got != node {
		t.Fatalf("marker node %q, want the new primary's %q", got, node)
	}
	for _, w := range []*view.Watcher{w, w2} {
		if s := w.Check(ctx); !s.Trusted || s.Gen != "g2" {
			t.Fatalf("after the rebuild: %+v", s)
		}
		if err := w.Confirm(ctx); err != nil {
			t.Fatalf("confirm after the rebuild: %v", err)
		}
	}
	if st := b.HGet(ctx, view.MarkerKey, "state").Val(); st != view.Ready {
		t.Fatalf("marker state %q after the checks, want ready (one rebuild)", st)
	}
}

// A rebuild during which the node changed (its first writes on a node that
// was then replaced) does not mark the view ready on the new one.
func TestSetReadyRefusesANodeChangedDuringTheRebuild(t *testing.T) {
	if testenv.ClusterMode() {
		t.Skip("a primary and a replica of its own: once, in the single-Redis run")
	}
	ctx := context.Background()
	a := testenv.StartRedis(t)
	if err := view.SetRebuilding(ctx, a.Client(), "g1", "test"); err != nil {
		t.Fatal(err)
	}
	b := replicaOf(t, ctx, a)
	if err := b.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := view.SetReady(ctx, b, "g1", nil, time.Now()); !errors.Is(err, view.ErrNodeChanged) {
		t.Fatalf("SetReady after a change of node = %v, want ErrNodeChanged", err)
	}
	if st := b.HGet(ctx, view.MarkerKey, "state").Val(); st != view.Rebuilding {
		t.Fatalf("marker state %q, want rebuilding", st)
	}
	// The next rebuild, from its start on the new node, ends ready.
	if err := view.SetRebuilding(ctx, b, "g2", "again"); err != nil {
		t.Fatal(err)
	}
	if err := view.SetReady(ctx, b, "g2", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// A ready marker made before the node was recorded (an older version) is
// trusted and armed with the node that holds it; a restart of that node
// (a new replication ID, its data kept) is then a change.
func TestAMarkerWithoutNodeIsArmed(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	if err := rdb.HSet(ctx, view.MarkerKey, "gen", "old", "state", view.Ready, "writes", strconv.Itoa(7)).Err(); err != nil {
		t.Fatal(err)
	}
	w := view.NewWatcher(rdb, view.Options{}, nil, zap.NewNop())
	if s := w.Check(ctx); !s.Trusted {
		t.Fatalf("legacy marker: %+v", s)
	}
	node, err := view.NodeID(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if got := rdb.HGet(ctx, view.MarkerKey, "node").Val(); got != node || node == "" {
		t.Fatalf("marker node %q, want %q", got, node)
	}
	// Another node's ID on the marker: the view is not trusted.
	if err := rdb.HSet(ctx, view.MarkerKey, "node", "0000000000000000000000000000000000000001").Err(); err != nil {
		t.Fatal(err)
	}
	if s := w.Check(ctx); s.Trusted || s.Cause != "behind" {
		t.Fatalf("another node: %+v, want not trusted (behind)", s)
	}
}
