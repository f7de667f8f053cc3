package itemcache_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/itemcache"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

func rec(s topics.ItemState) *kgo.Record {
	s.V = topics.Version
	return &kgo.Record{Topic: topics.Items, Key: []byte(s.ItemID), Value: topics.Encode(&s)}
}

func TestCacheFollowsTheItemsTopic(t *testing.T) {
	brokers := testenv.Kafka(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer prod.Close()
	require.NoError(t, prod.ProduceSync(ctx,
		rec(topics.ItemState{ItemID: "a", Stock: 5, Enabled: true, Version: 2}),
		rec(topics.ItemState{ItemID: "a", Stock: 99, Enabled: true, Version: 1}), // stale: ignored
		&kgo.Record{Topic: topics.Items, Key: []byte("b"), Value: []byte("{not json")},
		rec(topics.ItemState{ItemID: "c", Stock: 1, Enabled: false, Version: 1}),
		&kgo.Record{Topic: topics.Items, Key: []byte("wrong-key"), Value: topics.Encode(&topics.ItemState{V: 1, ItemID: "d", Version: 1})},
	).FirstErr())

	c, err := itemcache.New([]kgo.Opt{kgo.SeedBrokers(brokers...)}, zaptest.NewLogger(t))
	require.NoError(t, err)
	go func() { _ = c.Run(ctx) }()
	require.NoError(t, c.Sync(ctx))

	a, ok := c.Get("a")
	require.True(t, ok)
	assert.Equal(t, int64(5), a.Stock, "the newest version wins")
	_, ok = c.Get("b")
	assert.False(t, ok, "an undecodable record is skipped")
	_, ok = c.Get("d")
	assert.False(t, ok, "a record whose key is not its item is skipped")
	cst, ok := c.Get("c")
	require.True(t, ok)
	assert.False(t, cst.Enabled)
	assert.Equal(t, int64(2), c.Skipped())

	// Updates and tombstones after start are followed.
	require.NoError(t, prod.ProduceSync(ctx,
		rec(topics.ItemState{ItemID: "a", Stock: 0, Enabled: true, Version: 3}),
		&kgo.Record{Topic: topics.Items, Key: []byte("c")}, // tombstone
	).FirstErr())
	require.NoError(t, c.Sync(ctx))
	a, _ = c.Get("a")
	assert.True(t, a.SoldOut())
	_, ok = c.Get("c")
	assert.False(t, ok, "a tombstone deletes the item")
	assert.Len(t, c.All(), 1)
}
