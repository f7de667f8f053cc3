package ingest

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// idleItems knows every item, each with an idleTimeout.
type idleItems struct{}

func (idleItems) Get(item string) (topics.ItemState, bool) {
	return topics.ItemState{ItemID: item, IdleTimeoutSeconds: 60}, true
}
func (idleItems) Sync(context.Context) error { return nil }

// registers are registrations of item by users at offsets from.., the
// record's time 1000 ms.
func registers(item string, from int64, users ...string) []*kgo.Record {
	out := make([]*kgo.Record, len(users))
	for i, u := range users {
		ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "tok-" + u, ItemID: item, UserID: u, RequestedAt: 1}
		out[i] = &kgo.Record{Topic: topics.Registrations, Offset: from + int64(i), Key: []byte(item), Value: topics.Encode(&ev),
			Timestamp: time.UnixMilli(1000)}
	}
	return out
}

func newTestRegistrations(t *testing.T, rdb redis.UniversalClient, box DeadLetters) *Registrations {
	return NewRegistrations(rdb, idleItems{}, box, NewMetrics(prometheus.NewRegistry()), zap.NewNop(), Retry{Attempts: 3, Backoff: time.Millisecond})
}

// goneRedis is a client of a port nothing listens on: every call fails.
func goneRedis(t *testing.T) redis.UniversalClient {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// decode makes an op of each record; one that breaks the contract becomes a
// letter and a mark of its offset, with no record to dead-letter again.
func TestChainDecodeLettersABadRecordAndMarksIt(t *testing.T) {
	h := newTestRegistrations(t, testenv.Redis(t), &letterBox{})
	recs := registers("tix", 0, "a", "b")
	other := registers("other", 2, "c")[0]
	other.Key = []byte("tix") // breaks the contract: the key is not its itemId
	recs = append(recs, other)
	var got *regBatch
	require.NoError(t, h.decode(func(_ context.Context, b *regBatch) error { got = b; return nil })(context.Background(), 0, recs))
	require.Len(t, got.ops, 3)
	assert.Equal(t, []queue.OpKind{queue.OpRegister, queue.OpRegister, queue.OpMark}, []queue.OpKind{got.ops[0].Kind, got.ops[1].Kind, got.ops[2].Kind})
	assert.Nil(t, got.opRecord[2], "the mark's record is dead-lettered once, as a letter")
	require.Len(t, got.letters, 1)
	assert.Equal(t, int64(2), got.letters[0].Record.Offset)
	assert.ErrorIs(t, got.letters[0].Err, topics.ErrInvalid)
}

// apply answers each op in one round; Redis down fails the batch.
func TestChainApplyAnswersEachOpOrFailsTheBatch(t *testing.T) {
	ctx := context.Background()
	h := newTestRegistrations(t, testenv.Redis(t), &letterBox{})
	b := &regBatch{}
	require.NoError(t, h.decode(func(_ context.Context, d *regBatch) error { b = d; return nil })(ctx, 0, registers("tix", 0, "a", "b")))
	require.NoError(t, h.apply(ctx, b))
	require.Len(t, b.res, 2)
	assert.Equal(t, queue.Added, b.res[0].Outcome)
	assert.Equal(t, queue.Added, b.res[1].Outcome)

	down := newTestRegistrations(t, goneRedis(t), &letterBox{})
	b.res = nil
	require.Error(t, down.apply(ctx, b))
	assert.Nil(t, b.res)
}

// retried tries an op Redis refuses Retry.Attempts times and notes the
// refusal; a failed call is returned, with nothing noted.
func TestChainRetriedNotesARefusalAfterItsAttempts(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	require.NoError(t, rdb.Set(ctx, queue.KeysFor("poison").Users, "not a hash", 0).Err())
	h := newTestRegistrations(t, rdb, &letterBox{})
	var b *regBatch
	recs := append(registers("poison", 0, "p"), registers("ok", 1, "u")...)
	require.NoError(t, h.decode(func(_ context.Context, d *regBatch) error { b = d; return nil })(ctx, 0, recs))
	require.NoError(t, h.retried(h.apply)(ctx, b))
	require.Error(t, b.st[0].err)
	assert.Contains(t, b.st[0].err.Error(), "WRONGTYPE")
	assert.Equal(t, 3, b.st[0].tries)
	assert.NoError(t, b.st[1].err)
	assert.Equal(t, queue.Added, b.res[1].Outcome)

	failed := errors.New("redis down")
	b.st = nil
	require.ErrorIs(t, h.retried(func(context.Context, *regBatch) error { return failed })(ctx, b), failed)
	assert.Nil(t, b.st, "nothing noted for a failed call")
}

// count counts the outcomes applied, not the refused ones, and only once
// the retries are done.
func TestChainCountCountsWhatWasApplied(t *testing.T) {
	h := newTestRegistrations(t, testenv.Redis(t), &letterBox{})
	set := func(_ context.Context, b *regBatch) error {
		b.res = []queue.Result{{Outcome: queue.Added}, {Outcome: queue.Released}, {Err: errors.New("WRONGTYPE")}}
		b.st = []refusal{{}, {}, {err: errors.New("WRONGTYPE"), tries: 3}}
		return nil
	}
	require.NoError(t, h.count(set)(context.Background(), &regBatch{}))
	assert.Equal(t, 1.0, testutil.ToFloat64(h.m.applied.WithLabelValues(string(queue.Added))))
	assert.Equal(t, 1.0, testutil.ToFloat64(h.m.applied.WithLabelValues(string(queue.Released))))
	assert.Equal(t, 1.0, testutil.ToFloat64(h.m.abandoned))
	assert.Equal(t, 2, testutil.CollectAndCount(h.m.applied), "the refused op is not counted")
	require.Error(t, h.count(func(context.Context, *regBatch) error { return errors.New("down") })(context.Background(), &regBatch{}))
	assert.Equal(t, 1.0, testutil.ToFloat64(h.m.applied.WithLabelValues(string(queue.Added))), "a failed batch counts nothing")
}

// deadLetter writes the bad records and the refused ones in one write, bad
// first; while the write fails the refusals are remembered for the batch's
// next attempt, and forgotten once written. A failed call writes nothing.
func TestChainDeadLetterWritesOnceAndRemembersUntilWritten(t *testing.T) {
	ctx := context.Background()
	box := &letterBox{fail: errors.New("kafka unavailable")}
	h := newTestRegistrations(t, testenv.Redis(t), box)
	bad := &kgo.Record{Offset: 5}
	refused := &kgo.Record{Offset: 6}
	batchOf := func() *regBatch {
		return &regBatch{partition: 1, ops: []queue.Op{{Offset: 5}, {Offset: 6}}, opRecord: []*kgo.Record{nil, refused},
			letters: []dlq.Letter{{Record: bad, Err: topics.ErrInvalid, Attempts: 1}}}
	}
	refuse := func(_ context.Context, b *regBatch) error {
		b.res = []queue.Result{{Outcome: queue.Marked}, {Err: errors.New("WRONGTYPE")}}
		b.st = []refusal{{}, {err: errors.New("WRONGTYPE"), tries: 3}}
		return nil
	}
	require.ErrorIs(t, h.deadLetter(refuse)(ctx, batchOf()), box.fail)
	r, ok := h.lookup(1, 6)
	require.True(t, ok, "remembered while its letter is not written")
	assert.Equal(t, 3, r.tries)

	box.fail = nil
	require.NoError(t, h.deadLetter(refuse)(ctx, batchOf()))
	assert.Equal(t, []int64{5, 6}, offsets(box.sent))
	assert.Equal(t, 3, box.sent[1].Attempts)
	_, ok = h.lookup(1, 6)
	assert.False(t, ok, "forgotten once written")

	box.sent = nil
	require.Error(t, h.deadLetter(func(context.Context, *regBatch) error { return errors.New("down") })(ctx, batchOf()))
	assert.Empty(t, box.sent, "a failed call is never dead-lettered")
}

// markSeen gives a place made on an item with an idleTimeout its first sign
// of life, the record's time, once the batch went through; not before.
func TestChainMarkSeenAfterTheBatch(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	h := newTestRegistrations(t, rdb, &letterBox{})
	var b *regBatch
	require.NoError(t, h.decode(func(_ context.Context, d *regBatch) error { b = d; return nil })(ctx, 0, registers("tix", 0, "a")))
	seen := queue.KeysFor("tix").Seen
	require.Error(t, h.markSeen(func(context.Context, *regBatch) error { return errors.New("down") })(ctx, b))
	n, err := rdb.ZCard(ctx, seen).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "nothing marked for a failed batch")

	require.NoError(t, h.markSeen(func(ctx context.Context, b *regBatch) error { return h.apply(ctx, b) })(ctx, b))
	at, err := rdb.ZScore(ctx, seen, queue.SeenMember("tok-a", "a")).Result()
	require.NoError(t, err)
	assert.Equal(t, 1000.0, at)
}

// report observes the batch and counts its letters once it went through.
func TestChainReportCountsLettersOfABatchDone(t *testing.T) {
	h := newTestRegistrations(t, testenv.Redis(t), &letterBox{})
	b := &regBatch{ops: make([]queue.Op, 4), letters: []dlq.Letter{{Record: &kgo.Record{}, Err: topics.ErrInvalid}}}
	require.Error(t, h.report(func(context.Context, *regBatch) error { return errors.New("down") })(context.Background(), b))
	assert.Zero(t, testutil.ToFloat64(h.m.deadLetters.WithLabelValues(topics.Registrations, dlq.ErrorType(topics.ErrInvalid))), "a failed batch reports nothing")
	require.NoError(t, h.report(func(context.Context, *regBatch) error { return nil })(context.Background(), b))
	assert.Equal(t, 1.0, testutil.ToFloat64(h.m.deadLetters.WithLabelValues(topics.Registrations, dlq.ErrorType(topics.ErrInvalid))))
}

// Every topic and error type is exported at 0 before any letter, and every
// topic's batch retries before any retry: the first is then an increase
// (WaitroomDeadLettersGrowing, WaitroomConsumerStuck), not a series born at
// 1 that increase() never sees.
func TestDeadLettersAndRetriesAreExportedAtZeroFromTheStart(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	want := `# HELP waitroom_consumer_dead_letters_total Records sent to a DLQ, by source topic and error type.
# TYPE waitroom_consumer_dead_letters_total counter
waitroom_consumer_dead_letters_total{error_type="PARSING_ERROR",topic="waitroom.items"} 0
waitroom_consumer_dead_letters_total{error_type="PARSING_ERROR",topic="waitroom.registrations"} 0
waitroom_consumer_dead_letters_total{error_type="PROCESSING_ERROR",topic="waitroom.items"} 0
waitroom_consumer_dead_letters_total{error_type="PROCESSING_ERROR",topic="waitroom.registrations"} 0
waitroom_consumer_dead_letters_total{error_type="VALIDATION_ERROR",topic="waitroom.items"} 0
waitroom_consumer_dead_letters_total{error_type="VALIDATION_ERROR",topic="waitroom.registrations"} 0
`
	require.NoError(t, testutil.CollectAndCompare(m.deadLetters, strings.NewReader(want)))
	want = `# HELP waitroom_consumer_batch_retries_total Failed batch attempts that were retried (Redis or Kafka trouble).
# TYPE waitroom_consumer_batch_retries_total counter
waitroom_consumer_batch_retries_total{topic="waitroom.items"} 0
waitroom_consumer_batch_retries_total{topic="waitroom.registrations"} 0
`
	require.NoError(t, testutil.CollectAndCompare(m.retries, strings.NewReader(want)), "so is every topic's batch retries (WaitroomConsumerStuck)")
}
