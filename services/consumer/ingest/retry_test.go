package ingest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// knownItems is an item cache that knows a fixed set of items.
type knownItems map[string]bool

func (k knownItems) Get(item string) (topics.ItemState, bool) {
	return topics.ItemState{ItemID: item}, k[item]
}
func (knownItems) Sync(context.Context) error { return nil }

// letterBox takes dead letters; the first failures sends fail.
type letterBox struct {
	mu       sync.Mutex
	failures int
	letters  []dlq.Letter
}

func (b *letterBox) Send(_ context.Context, ls ...dlq.Letter) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(ls) > 0 && b.failures > 0 {
		b.failures--
		return errors.New("kafka unavailable")
	}
	b.letters = append(b.letters, ls...)
	return nil
}

func (b *letterBox) all() []dlq.Letter {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]dlq.Letter(nil), b.letters...)
}

// regRecords are registrations of item at offsets 0.. of partition 0.
func regRecords(item string, users ...string) []*kgo.Record {
	out := make([]*kgo.Record, len(users))
	for i, u := range users {
		ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "tok-" + u, ItemID: item, UserID: u, RequestedAt: 1}
		out[i] = &kgo.Record{Topic: topics.Registrations, Partition: 0, Offset: int64(i), Key: []byte(item), Value: topics.Encode(&ev)}
	}
	return out
}

// A record Redis refuses is tried Attempts times, then dead-lettered as
// PROCESSING_ERROR with attempts=N; the other item of the batch is untouched.
func TestRefusedRecordRetriedThenDeadLettered(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, queue.KeysFor("poison").Users, "not a hash", 0).Err())
	box := &letterBox{}
	reg := prometheus.NewRegistry()
	h := ingest.NewRegistrations(rdb, knownItems{"poison": true, "ok": true}, box, ingest.NewMetrics(reg), zaptest.NewLogger(t),
		ingest.Retry{Attempts: 3, Backoff: 5 * time.Millisecond})
	recs := append(regRecords("poison", "p1", "p2"), regRecords("ok", "u1", "u2")...)
	for i, r := range recs {
		r.Offset = int64(i)
	}
	start := time.Now()
	require.NoError(t, h.Handle(ctx, 0, recs))
	assert.GreaterOrEqual(t, time.Since(start), 15*time.Millisecond, "two back-offs: 5ms, then 10ms")

	letters := box.all()
	require.Len(t, letters, 2)
	for i, l := range letters {
		assert.Equal(t, int64(i), l.Record.Offset)
		assert.Equal(t, 3, l.Attempts)
		assert.Equal(t, topics.ErrorTypeProcessing, dlq.ErrorType(l.Err))
		assert.Contains(t, l.Err.Error(), "WRONGTYPE")
	}
	line, err := queue.New(rdb).Waiting(ctx, "ok", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"tok-u1", "tok-u2"}, line)
	assert.Equal(t, 4.0, counter(t, reg, "waitroom_consumer_record_retries_total"), "2 records x 2 retries")
}

// A refusal that clears up between two tries is applied, in order, and
// nothing is dead-lettered: the retry really runs the script again although
// the first try had moved the applied-offset guard.
func TestRefusedRecordAppliedWhenRetrySucceeds(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	users := queue.KeysFor("tix").Users
	require.NoError(t, rdb.Set(ctx, users, "not a hash", 0).Err())
	box := &letterBox{}
	h := ingest.NewRegistrations(rdb, knownItems{"tix": true}, box, ingest.NewMetrics(prometheus.NewRegistry()), zaptest.NewLogger(t),
		ingest.Retry{Attempts: 3, Backoff: 300 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- h.Handle(ctx, 0, regRecords("tix", "a", "b", "c")) }()
	time.Sleep(100 * time.Millisecond) // the first try has failed; the back-off runs
	require.NoError(t, rdb.Del(ctx, users).Err())
	require.NoError(t, <-done)

	assert.Empty(t, box.all())
	line, err := queue.New(rdb).Waiting(ctx, "tix", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"tok-a", "tok-b", "tok-c"}, line)
	seq, err := rdb.Get(ctx, queue.KeysFor("tix").Seq).Int()
	require.NoError(t, err)
	assert.Equal(t, 3, seq)
}

// When the DLQ write fails, the batch comes again and its refused records,
// which now answer REPLAY, are still dead-lettered: never dropped.
func TestRefusedRecordNotLostWhenDLQWriteFails(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, queue.KeysFor("tix").Users, "not a hash", 0).Err())
	box := &letterBox{failures: 2}
	h := ingest.NewRegistrations(rdb, knownItems{"tix": true}, box, ingest.NewMetrics(prometheus.NewRegistry()), zaptest.NewLogger(t),
		ingest.Retry{Attempts: 2, Backoff: time.Millisecond})
	recs := regRecords("tix", "a", "b")
	for range 2 {
		require.Error(t, h.Handle(ctx, 0, recs))
	}
	require.NoError(t, h.Handle(ctx, 0, recs))
	letters := box.all()
	require.Len(t, letters, 2)
	for i, l := range letters {
		assert.Equal(t, int64(i), l.Record.Offset)
		assert.Contains(t, l.Err.Error(), "WRONGTYPE")
		assert.Equal(t, 2, l.Attempts, "the tries of every handling count toward the bound")
	}
}

// An item whose later record changed the line cannot be rewound: its refused
// record is dead-lettered at once rather than applied out of order.
func TestRefusedRecordNotRetriedAcrossALaterChange(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	// The waiting set is corrupt only for the first register: a leave of a
	// user without a place never reads it, and answers NOT_IN_LINE; a
	// complete changes the line (ENDED) and stops the rewind.
	require.NoError(t, rdb.Set(ctx, queue.KeysFor("tix").Waiting, "not a zset", 0).Err())
	box := &letterBox{}
	h := ingest.NewRegistrations(rdb, knownItems{"tix": true}, box, ingest.NewMetrics(prometheus.NewRegistry()), zaptest.NewLogger(t),
		ingest.Retry{Attempts: 5, Backoff: time.Millisecond})
	recs := regRecords("tix", "a")
	done := topics.RegistrationEvent{V: 1, Kind: topics.KindComplete, TokenID: "tok-z", ItemID: "tix", UserID: "z", RequestedAt: 1}
	recs = append(recs, &kgo.Record{Topic: topics.Registrations, Offset: 1, Key: []byte("tix"), Value: topics.Encode(&done)})
	require.NoError(t, h.Handle(ctx, 0, recs))
	letters := box.all()
	require.Len(t, letters, 1)
	assert.Equal(t, 1, letters[0].Attempts)
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
