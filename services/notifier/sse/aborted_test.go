package sse_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kafka/fence"
	"github.com/waitroom/waitroom/services/notifier/sse"
	"github.com/waitroom/waitroom/topics"
)

// A fenced leader's transaction is aborted: the admission it held tells
// nobody ADMITTED, while a committed admission written after it on the same
// partition (so the notifier read past the aborted one) is told.
func TestNotifierNeverTellsAdmittedFromAnAbortedTransaction(t *testing.T) {
	w := newWorld(t)
	pol := topics.AdmissionPolicy{RatePerSecond: 1000, MaxActive: 5, SessionTTLSeconds: 60}
	w.setItem("ab", -1, true, pol)
	w.setItem("cd", -1, true, pol)
	zombie, told := w.register("ab", 1)[0], w.register("cd", 1)[0]
	n := w.notifier(50*time.Millisecond, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zc, err := w.open(ctx, n.eventsURL("ab", zombie.Token), nil)
	require.NoError(t, err)
	defer zc.close()
	tc, err := w.open(ctx, n.eventsURL("cd", told.Token), nil)
	require.NoError(t, err)
	defer tc.close()
	for _, c := range []*sseConn{zc, tc} { // both streams are open and waiting
		ev, err := c.next()
		require.NoError(t, err)
		require.Equal(t, sse.EventPosition, ev.Type)
	}

	// Both events on partition 0, the aborted one first.
	admit := func(item, tok string) *kgo.Record {
		exp := time.Now().Add(time.Minute).UnixMilli()
		ev := topics.AdmissionEvent{V: topics.Version, ItemID: item, Admitted: []string{tok}, ExpiresAt: []int64{exp},
			Head: 1, Active: 1, Epoch: 1, At: time.Now().UnixMilli()}
		return &kgo.Record{Topic: topics.Admissions, Key: []byte(item), Value: topics.Encode(&ev), Partition: 0}
	}
	opts := []kgo.Opt{kgo.SeedBrokers(w.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0)}
	leader, err := kgo.NewClient(append(opts, kgo.TransactionalID("fenced-0"), kgo.TransactionTimeout(fence.Timeout))...)
	require.NoError(t, err)
	defer leader.Close()
	require.NoError(t, leader.BeginTransaction())
	require.NoError(t, leader.ProduceSync(ctx, admit("ab", zombie.TokenID)).FirstErr())
	adm, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer adm.Close()
	require.NoError(t, fence.Fence(ctx, adm, "fenced-0"), "the new leader takes the id over: the transaction is aborted")
	require.Error(t, leader.EndTransaction(ctx, kgo.TryCommit), "the fenced leader cannot commit")
	require.NoError(t, adm.ProduceSync(ctx, admit("cd", told.TokenID)).FirstErr())

	for {
		ev, err := tc.next()
		require.NoError(t, err, "the committed admission is told")
		if ev.Type == sse.EventAdmitted {
			break
		}
	}
	// The notifier read past the aborted admission; its stream may only
	// have been told positions.
	sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer scancel()
	go func() { <-sctx.Done(); zc.close() }()
	for {
		ev, err := zc.next()
		if err != nil {
			break // closed: nothing more was told
		}
		require.NotEqual(t, sse.EventAdmitted, ev.Type, "ADMITTED told from an aborted transaction")
	}
}
