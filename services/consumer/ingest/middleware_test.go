package ingest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/retry"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// letterBox keeps what was sent to it, or refuses with fail.
type letterBox struct {
	sent []dlq.Letter
	fail error
}

func (b *letterBox) Send(_ context.Context, ls ...dlq.Letter) error {
	if b.fail != nil {
		return b.fail
	}
	b.sent = append(b.sent, ls...)
	return nil
}

func offsets(ls []dlq.Letter) []int64 {
	var o []int64
	for _, l := range ls {
		o = append(o, l.Record.Offset)
	}
	return o
}

// deadLettered hands every record to its handler in order, sends the bad
// ones in one write after the batch and reports them only once written; a
// failed call or a failed write fails the batch and dead-letters nothing.
func TestDeadLetteredSendsBadRecordsAfterTheBatchAndNeverACall(t *testing.T) {
	ctx := context.Background()
	recs := batch(10, "a", "b", "c", "d")
	refused := errors.New("WRONGTYPE refused")
	down := errors.New("dial tcp: connection refused")
	run := func(box *letterBox, outcome map[int64]error) (seen []int64, reported []int64, err error) {
		h := deadLettered(box, func(l dlq.Letter) { reported = append(reported, l.Record.Offset) }, func(_ context.Context, r *kgo.Record) error {
			seen = append(seen, r.Offset)
			return outcome[r.Offset]
		})
		return seen, reported, h(ctx, 0, recs)
	}

	box := &letterBox{}
	seen, reported, err := run(box, map[int64]error{11: &badRecord{err: refused, attempts: 3}, 13: &badRecord{err: topics.ErrInvalid, attempts: 1}})
	require.NoError(t, err)
	assert.Equal(t, []int64{10, 11, 12, 13}, seen, "every record, in order")
	assert.Equal(t, []int64{11, 13}, offsets(box.sent))
	assert.Equal(t, []int64{11, 13}, reported)
	assert.Equal(t, 3, box.sent[0].Attempts)
	assert.ErrorIs(t, box.sent[1].Err, topics.ErrInvalid)

	box = &letterBox{}
	seen, reported, err = run(box, map[int64]error{11: &badRecord{err: refused, attempts: 3}, 12: down})
	require.ErrorIs(t, err, down, "a failed call fails the batch")
	assert.Equal(t, []int64{10, 11, 12}, seen, "the batch stops at the failed call")
	assert.Empty(t, box.sent, "nothing is dead-lettered while a call fails")
	assert.Empty(t, reported)

	box = &letterBox{fail: errors.New("dlq write failed")}
	_, reported, err = run(box, map[int64]error{11: &badRecord{err: refused, attempts: 3}})
	require.ErrorIs(t, err, box.fail, "a failed DLQ write fails the batch (a nack)")
	assert.Empty(t, reported, "no letter is reported before it is written")
}

// decoded applies what decodes and marks the rest bad after one attempt,
// without applying it.
func TestDecodedMarksWhatDoesNotDecodeBad(t *testing.T) {
	ctx := context.Background()
	var applied []string
	h := decoded(decodeItem, func(_ context.Context, it itemRecord) error {
		applied = append(applied, it.key)
		return nil
	})
	require.NoError(t, h(ctx, &kgo.Record{Key: []byte("shoes")}), "a tombstone of a valid id")
	for _, r := range []*kgo.Record{{Key: []byte("")}, {Key: []byte("hats"), Value: []byte("{")}} {
		err := h(ctx, r)
		var bad *badRecord
		require.ErrorAs(t, err, &bad, "%q", r.Value)
		assert.Equal(t, 1, bad.attempts)
	}
	assert.Equal(t, []string{"shoes"}, applied, "only the record that decoded is applied")
}

// retried retries what Redis refuses for the record until it passes or the
// attempts are spent (then it is bad), and returns a failed call at once.
func TestRetriedRetriesARefusalButNotAFailedCall(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	require.NoError(t, rdb.Set(ctx, "k", "a string", 0).Err())
	p := retry.Policy{Initial: time.Millisecond, Attempts: 3}
	push := func(c redis.UniversalClient, calls *int) applyFunc[string] {
		return func(ctx context.Context, key string) error { *calls++; return c.LPush(ctx, key, "x").Err() }
	}

	calls, retries := 0, 0
	err := retried(p, queue.IsRecordError, func() { retries++ }, push(rdb, &calls))(ctx, "k")
	var bad *badRecord
	require.ErrorAs(t, err, &bad, "WRONGTYPE every time: bad once the attempts are spent")
	assert.Equal(t, 3, bad.attempts)
	assert.Equal(t, 3, calls)
	assert.Equal(t, 2, retries)

	calls, retries = 0, 0
	fixed := func(ctx context.Context, key string) error {
		err := push(rdb, &calls)(ctx, key)
		rdb.Del(ctx, key) // the key mended after the first refusal
		return err
	}
	require.NoError(t, rdb.Set(ctx, "k", "a string", 0).Err())
	require.NoError(t, retried(p, queue.IsRecordError, func() { retries++ }, fixed)(ctx, "k"))
	assert.Equal(t, 2, calls, "passes on the retry")
	assert.Equal(t, 1, retries)

	gone := goneRedis(t)
	calls, retries = 0, 0
	err = retried(p, queue.IsRecordError, func() { retries++ }, push(gone, &calls))(ctx, "k")
	require.Error(t, err)
	assert.False(t, errors.As(err, &bad), "a failed call is never bad: %v", err)
	assert.Equal(t, 1, calls, "nor retried here (the runner retries the batch)")
	assert.Zero(t, retries)
}
