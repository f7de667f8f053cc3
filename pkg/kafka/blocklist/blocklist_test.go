package blocklist_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/blocklist"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

func rec(t *testing.T, b topics.BlockState) *kgo.Record {
	r, err := blocklist.Record(b)
	require.NoError(t, err)
	return r
}

// The list follows the topic: users and ranges (v4 and v6, the longest range
// wins), expiry on the injected clock, tombstones lift, a malformed record
// blocks nobody and is counted, and a new list rebuilds the same state.
func TestListFollowsTheBlocksTopic(t *testing.T) {
	brokers := testenv.Kafka(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer prod.Close()
	now := time.UnixMilli(1_000_000)
	require.NoError(t, prod.ProduceSync(ctx,
		rec(t, topics.BlockState{Subject: "user:mallory", Reason: "bot", At: 1}),
		rec(t, topics.BlockState{Subject: "ip:203.0.113.9/24", Reason: "scalper farm", At: 1}),
		rec(t, topics.BlockState{Subject: "ip:203.0.113.128/25", Reason: "narrower", At: 1}),
		rec(t, topics.BlockState{Subject: "ip:2001:db8::/32", Reason: "v6", At: 1}),
		rec(t, topics.BlockState{Subject: "user:brief", Reason: "a minute", Until: now.Add(time.Minute).UnixMilli(), At: 1}),
		&kgo.Record{Topic: topics.Blocks, Key: []byte("user:eve"), Value: []byte(`{"v":1,"subject":"user:eve"}`)}, // no at
		&kgo.Record{Topic: topics.Blocks, Key: []byte("user:x"), Value: topics.Encode(&topics.BlockState{V: 1, Subject: "user:y", At: 1})},
	).FirstErr())

	open := func() *blocklist.List {
		l, err := blocklist.New([]kgo.Opt{kgo.SeedBrokers(brokers...)}, zaptest.NewLogger(t))
		require.NoError(t, err)
		l.WithClock(func() time.Time { return now })
		go func() { _ = l.Run(ctx) }()
		require.NoError(t, l.Sync(ctx))
		return l
	}
	l := open()
	b, ok := l.Check("mallory", "198.51.100.1")
	require.True(t, ok)
	assert.Equal(t, "bot", b.Reason)
	b, ok = l.Check("alice", "203.0.113.77")
	require.True(t, ok)
	assert.Equal(t, "scalper farm", b.Reason)
	b, ok = l.Check("alice", "::ffff:203.0.113.200")
	require.True(t, ok)
	assert.Equal(t, "narrower", b.Reason, "the longest range, and a mapped v4 address is v4")
	_, ok = l.Check("alice", "2001:db8:1::5")
	assert.True(t, ok)
	for _, ip := range []string{"203.0.114.1", "2001:db9::1", "not-an-ip", ""} {
		_, ok = l.Check("alice", ip)
		assert.False(t, ok, ip)
	}
	_, ok = l.Check("eve", "")
	assert.False(t, ok, "a malformed record blocks nobody")
	_, ok = l.Check("y", "")
	assert.False(t, ok, "nor does a record under another key")
	assert.Equal(t, int64(2), l.Skipped())
	_, ok = l.User("brief")
	assert.True(t, ok)
	now = now.Add(time.Minute)
	_, ok = l.User("brief")
	assert.False(t, ok, "expired at until")
	assert.Len(t, l.All(), 5, "expired blocks are listed until lifted")

	lift, err := blocklist.Lift("ip:203.0.113.0/24")
	require.NoError(t, err)
	require.NoError(t, prod.ProduceSync(ctx, lift).FirstErr())
	require.NoError(t, l.Sync(ctx))
	b, ok = l.Check("alice", "203.0.113.200")
	require.True(t, ok)
	assert.Equal(t, "narrower", b.Reason)
	_, ok = l.Check("alice", "203.0.113.1")
	assert.False(t, ok, "lifted")

	again := open()
	assert.Equal(t, l.All(), again.All(), "a new list rebuilds the same state from the topic")
}

func TestRecordRefusesBadSubjects(t *testing.T) {
	for _, s := range []string{"", "bob", "ip:1.2.3.4/40", "user:a b"} {
		_, err := blocklist.Record(topics.BlockState{Subject: s, At: 1})
		assert.ErrorIs(t, err, topics.ErrInvalid, s)
	}
	r, err := blocklist.Record(topics.BlockState{Subject: "ip:10.1.2.3/8", At: 1})
	require.NoError(t, err)
	assert.Equal(t, "ip:10.0.0.0/8", string(r.Key))
}
