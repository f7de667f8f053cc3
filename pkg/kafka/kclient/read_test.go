package kclient_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"github.com/waitroom/waitroom/topics"
)

// produceN writes n records to each of the first parts partitions of topic,
// values "p/i".
func produceN(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, parts, n int) {
	t.Helper()
	for p := range parts {
		for i := range n {
			r := &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte(strconv.Itoa(p) + "/" + strconv.Itoa(i))}
			require.NoError(t, cl.ProduceSync(ctx, r).FirstErr())
		}
	}
}

// ReadToEnd reads what the topic held at the call, each partition in
// order, and nothing produced after; SkipPartition drops one partition and
// SkipAll ends the read.
func TestReadToEndReadsWhatTheTopicHeldInOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seeds := testenv.Kafka(t, 3)
	base := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	cl, err := kgo.NewClient(append(base, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	require.NoError(t, err)
	defer cl.Close()
	topic := topics.Registrations
	produceN(ctx, t, cl, topic, 2, 5)

	seen := map[int32][]int64{}
	require.NoError(t, kclient.ReadToEnd(ctx, base, topic, func(r *kgo.Record) error {
		seen[r.Partition] = append(seen[r.Partition], r.Offset)
		if len(seen[r.Partition]) == 3 { // the read goes on past a later produce
			produceN(ctx, t, cl, topic, 1, 1)
		}
		return nil
	}))
	assert.Equal(t, map[int32][]int64{0: {0, 1, 2, 3, 4}, 1: {0, 1, 2, 3, 4}}, seen)

	clear(seen)
	require.NoError(t, kclient.ReadToEnd(ctx, base, topic, func(r *kgo.Record) error {
		seen[r.Partition] = append(seen[r.Partition], r.Offset)
		if r.Partition == 0 && r.Offset == 1 {
			return kclient.SkipPartition
		}
		return nil
	}))
	assert.Equal(t, []int64{0, 1}, seen[0])
	assert.Len(t, seen[1], 5)

	n := 0
	require.NoError(t, kclient.ReadToEnd(ctx, base, topic, func(*kgo.Record) error {
		n++
		if n == 4 {
			return kclient.SkipAll
		}
		return nil
	}))
	assert.Equal(t, 4, n)
}
