package ingest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/kafka/itemcache"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/consumer/consume"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// A consumer killed after writing a batch to Redis but before committing it,
// then a new consumer of the same group: nothing lost, nothing applied twice.
func TestConsumerKilledMidBatchLosesAndDoublesNothing(t *testing.T) {
	brokers := testenv.Kafka(t, 6)
	rdb := testenv.Redis(t)
	log := zaptest.NewLogger(t)
	ctx := context.Background()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond))
	require.NoError(t, err)
	defer prod.Close()

	items := []string{"alpha", "beta", "gamma"}
	const per = 4000
	var recs []*kgo.Record
	for _, id := range items {
		s := topics.ItemState{V: 1, ItemID: id, Stock: -1, Enabled: true, Version: 1, UpdatedAt: 1}
		recs = append(recs, &kgo.Record{Topic: topics.Items, Key: []byte(id), Value: topics.Encode(&s)})
	}
	require.NoError(t, prod.ProduceSync(ctx, recs...).FirstErr())
	recs = recs[:0]
	for i := 0; i < per; i++ {
		for _, id := range items {
			ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: fmt.Sprintf("%s-%05d", id, i),
				ItemID: id, UserID: fmt.Sprintf("u%d", i), RequestedAt: 1}
			recs = append(recs, &kgo.Record{Topic: topics.Registrations, Key: []byte(id), Value: topics.Encode(&ev)})
		}
	}
	res := prod.ProduceSync(ctx, recs...)
	require.NoError(t, res.FirstErr())
	want := map[string][]string{} // per item, tokens in offset order
	for _, r := range res {
		var ev topics.RegistrationEvent
		ev, err = topics.DecodeRegistration(r.Record.Value)
		require.NoError(t, err)
		want[ev.ItemID] = append(want[ev.ItemID], ev.TokenID)
	}

	cache, err := itemcache.New([]kgo.Opt{kgo.SeedBrokers(brokers...)}, log)
	require.NoError(t, err)
	cctx, stopCache := context.WithCancel(ctx)
	defer stopCache()
	go func() { _ = cache.Run(cctx) }()
	line := queue.New(rdb)
	dlqCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer dlqCl.Close()
	reg := prometheus.NewRegistry()
	h := ingest.NewRegistrations(rdb, cache, dlq.NewWriter(dlqCl), ingest.NewMetrics(reg), log, ingest.Retry{})

	member := func() *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, consume.GroupOpts("g", topics.Registrations)...)...)
		require.NoError(t, err)
		return cl
	}
	total := func() int64 {
		var n int64
		for _, id := range items {
			c, err := rdb.ZCard(ctx, queue.KeysFor(id).Waiting).Result()
			require.NoError(t, err)
			n += c
		}
		return n
	}

	// First member: after its fourth successful batch has reached Redis, it dies
	// before the poll is committed.
	first := member()
	ctx1, kill := context.WithCancel(ctx)
	var batches atomic.Int32
	crashy := func(ctx context.Context, p int32, rs []*kgo.Record) error {
		if err := h.Handle(ctx, p, rs); err != nil {
			return err
		}
		if batches.Add(1) == 4 {
			kill()
			return context.Canceled
		}
		return nil
	}
	require.NoError(t, consume.Run(ctx1, first, crashy, log, consume.Options{MaxPollRecords: 700}))
	first.Close()
	done := total()
	require.Greater(t, done, int64(0), "the first member applied something")
	require.Less(t, done, int64(len(items)*per), "the first member died before the end")

	second := member()
	defer second.Close()
	ctx2, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = consume.Run(ctx2, second, h.Handle, log, consume.Options{MaxPollRecords: 700}) }()
	require.Eventually(t, func() bool { return total() == int64(len(items)*per) }, 60*time.Second, 20*time.Millisecond)

	for _, id := range items {
		got, err := line.Waiting(ctx, id, 0)
		require.NoError(t, err)
		assert.Equal(t, want[id], got, "order of %s", id)
		seq, err := rdb.Get(ctx, queue.KeysFor(id).Seq).Int()
		require.NoError(t, err)
		assert.Equal(t, per, seq, "%s: every record applied exactly once", id)
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var replayed float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if mf.GetName() == "waitroom_consumer_applied_total" && l.GetValue() == string(queue.Replay) {
					replayed = m.GetCounter().GetValue()
				}
			}
		}
	}
	assert.Positive(t, replayed, "the second member must have been redelivered records the first had applied")
}
