package promote

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two replicas share 4 shards: ShardLeaders names, for every shard, the
// replica whose lock it is, with what that replica said about itself, from
// either replica; once one stops, the other leads them all. Their
// waitroom_scheduler_leader sum to waitroom_scheduler_shards while every
// shard is led, as the alert WaitroomSchedulerShardUnled expects.
func TestShardLeadersNameTheReplicas(t *testing.T) {
	w := newWorld(t)
	opt := func(name string) Options {
		return Options{Tick: 20 * time.Millisecond, LockExpiry: 300 * time.Millisecond, Shards: 4, Describe: name}
	}
	a, b := w.replica(opt("host-a :1")), w.replica(opt("host-b :2"))
	actx, stopA := context.WithCancel(context.Background())
	bctx, stopB := context.WithCancel(context.Background())
	defer stopB()
	adone, bdone := make(chan error, 1), make(chan error, 1)
	go func() { adone <- a.Run(actx) }()
	go func() { bdone <- b.Run(bctx) }()

	hosts := map[string]string{a.ID(): "host-a :1", b.ID(): "host-b :2"}
	ctx := context.Background()
	require.Eventually(t, func() bool {
		ls, err := a.ShardLeaders(ctx)
		require.NoError(t, err)
		n := map[string]int{}
		for _, l := range ls {
			n[l.Replica]++
		}
		return len(ls) == 4 && n[a.ID()] == 2 && n[b.ID()] == 2
	}, 10*time.Second, 20*time.Millisecond, "two shards each")
	led := func(ss ...*Scheduler) (n float64) {
		for _, s := range ss {
			n += testutil.ToFloat64(s.m.leader)
		}
		return n
	}
	assert.Equal(t, 4.0, testutil.ToFloat64(a.m.shards))
	assert.Equal(t, 4.0, testutil.ToFloat64(b.m.shards))
	require.Eventually(t, func() bool { return led(a, b) == 4 }, 5*time.Second, 20*time.Millisecond, "the replicas export 4 shards led")
	ls, err := b.ShardLeaders(ctx)
	require.NoError(t, err)
	for i, l := range ls {
		assert.Equal(t, i, l.Shard)
		assert.Equal(t, hosts[l.Replica], l.Host, "shard %d", i)
		assert.Equal(t, l.Replica == b.ID(), l.Self, "shard %d: asked of b", i)
	}

	stopA()
	require.NoError(t, <-adone)
	require.Eventually(t, func() bool {
		ls, err := b.ShardLeaders(ctx)
		require.NoError(t, err)
		for _, l := range ls {
			if l.Replica != b.ID() || !l.Self {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "b leads every shard after a stopped")
	require.Eventually(t, func() bool { return led(b) == 4 }, 5*time.Second, 20*time.Millisecond, "b exports the 4 shards led")
	stopB()
	require.NoError(t, <-bdone)
	ls, err = b.ShardLeaders(ctx)
	require.NoError(t, err)
	for _, l := range ls {
		assert.Empty(t, l.Replica, "released on stop: nobody leads shard %d", l.Shard)
	}
}
