package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/fence"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// A scheduler leader killed mid-transaction, its id then fenced (its abort
// marker the last offset of its admissions partition, past the view's
// marker), costs no rebuild: the consumer's watcher keeps trusting the view
// and AutoRebuild does nothing. An admission committed later that the view
// missed (its marker not advanced) is still rebuilt from.
func TestAutoRebuildPassesOverADeadLeadersAbortMarker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	brokers := testenv.Kafka(t, 1)
	rdb := testenv.Redis(t)
	base := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	admCl, err := kgo.NewClient(base...)
	require.NoError(t, err)
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	var o kadm.Offsets
	o.AddOffset(topics.Registrations, 0, 0, -1)
	_, err = adm.CommitOffsets(ctx, "g", o) // the registrations group, nothing consumed
	require.NoError(t, err)

	claim := func(epoch int64) *kgo.Record {
		return &kgo.Record{Topic: topics.Admissions, Key: []byte(topics.EpochClaimItem), Value: topics.Encode(&topics.AdmissionEvent{
			V: topics.Version, Kind: topics.KindEpochClaim, ItemID: topics.EpochClaimItem, Epoch: epoch, At: time.Now().UnixMilli()})}
	}
	leader, err := kgo.NewClient(append(append([]kgo.Opt{}, base...), kgo.TransactionalID(fence.ID("t", 0)), kgo.TransactionTimeout(fence.Timeout))...)
	require.NoError(t, err)
	defer leader.Close()
	require.NoError(t, leader.BeginTransaction())
	require.NoError(t, leader.ProduceSync(ctx, claim(1)).FirstErr())
	require.NoError(t, leader.EndTransaction(ctx, kgo.TryCommit))
	lso := func() int64 {
		l, err := adm.ListCommittedOffsets(ctx, topics.Admissions)
		require.NoError(t, err)
		got, _ := l.Lookup(topics.Admissions, 0)
		return got.Offset
	}
	field := view.Field(topics.Admissions, 0)
	require.NoError(t, view.SetReady(ctx, rdb, "g1", map[string]int64{field: lso()}, time.Now()))

	// Killed mid-transaction; its id fenced (as a new leader or a rebuild does).
	require.NoError(t, leader.BeginTransaction())
	require.NoError(t, leader.ProduceSync(ctx, claim(2)).FirstErr())
	require.NoError(t, fence.Fence(ctx, admCl, fence.ID("t", 0)))
	require.Equal(t, int64(4), lso(), "two events, a commit and an abort marker")

	const interval, grace = 50 * time.Millisecond, 200 * time.Millisecond
	rec := view.NewKafkaRecord(adm, "g", grace).ReadGaps(base)
	w := view.NewWatcher(rdb, view.Options{Interval: interval, Record: rec}, nil, zaptest.NewLogger(t))
	reg := prometheus.NewRegistry()
	run, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { _ = w.Run(run); done <- struct{}{} }()
	go func() {
		_ = ingest.AutoRebuild(run, rdb, w, rec, base, "t", reg, zaptest.NewLogger(t))
		done <- struct{}{}
	}()
	defer func() { stop(); <-done; <-done }()

	gen := func() string {
		m, _, err := view.Read(ctx, rdb)
		require.NoError(t, err)
		return m.Gen + "/" + m.State
	}
	time.Sleep(grace + 20*interval)
	require.True(t, w.Status().Trusted, "%+v", w.Status())
	require.Equal(t, "g1/"+view.Ready, gen(), "no rebuild")
	metrics, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range metrics {
		require.NotEqual(t, "waitroom_view_rebuilds_total", f.GetName(), "no rebuild ran")
	}

	// A committed admission the view missed (a client's, the marker not
	// advanced past it): rebuilt from.
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, base...), kgo.TransactionalID(fence.ID("t", 1)), kgo.TransactionTimeout(fence.Timeout))...)
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.BeginTransaction())
	require.NoError(t, cl.ProduceSync(ctx, claim(3)).FirstErr())
	require.NoError(t, cl.EndTransaction(ctx, kgo.TryCommit))
	require.Eventually(t, func() bool { return gen() != "g1/"+view.Ready }, 20*time.Second, interval, "the view is rebuilt")
	require.Eventually(t, func() bool {
		n, err := testutil.GatherAndCount(reg, "waitroom_view_rebuilds_total")
		return err == nil && n > 0 && w.Status().Trusted
	}, 20*time.Second, interval, "the rebuild ran and the view is trusted again")
	require.NotEqual(t, "g1", w.Status().Gen)
}
