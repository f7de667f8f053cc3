package stack_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/topics"
)

// Garbage and invalid records put straight on the topic land in the DLQ with
// their headers, and the partition moves on to the good records behind them.
func TestBadRecordsGoToDLQ(t *testing.T) {
	e := newEnv(t, item("tix"))
	e.start()
	ctx := context.Background()
	good := func(user string) *kgo.Record {
		ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "tok-" + user, ItemID: "tix", UserID: user, RequestedAt: 1}
		return &kgo.Record{Topic: topics.Registrations, Key: []byte("tix"), Value: topics.Encode(&ev)}
	}
	unknown := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "tok-x", ItemID: "ghost", UserID: "x", RequestedAt: 1}
	future := `{"v":2,"kind":"register","tokenId":"t","itemId":"tix","userId":"f","requestedAt":1}`
	mismatch := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "tok-m", ItemID: "other", UserID: "m", RequestedAt: 1}
	recs := []*kgo.Record{
		good("u1"),
		{Topic: topics.Registrations, Key: []byte("tix"), Value: []byte("\x00garbage{"), Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}}},
		good("u2"),
		{Topic: topics.Registrations, Key: []byte("tix"), Value: []byte(future)},
		{Topic: topics.Registrations, Key: []byte("tix"), Value: []byte(`{"v":1,"kind":"register","tokenId":"t","itemId":"tix","userId":"bad id","requestedAt":1}`)},
		{Topic: topics.Registrations, Key: []byte("tix"), Value: topics.Encode(&mismatch)},
		good("u3"),
		{Topic: topics.Registrations, Key: []byte("ghost"), Value: topics.Encode(&unknown)},
	}
	// ProduceSync answers in completion order; each record gets its own
	// partition and offset set, so read them from recs.
	require.NoError(t, e.kcl.ProduceSync(ctx, recs...).FirstErr())
	line := e.waitLine("tix", 3)
	assert.Equal(t, []string{"tok-u1", "tok-u2", "tok-u3"}, line)

	want := map[int64]string{ // source offset -> error type, for the tix partition
		recs[1].Offset: topics.ErrorTypeParsing,
		recs[3].Offset: topics.ErrorTypeParsing,
		recs[4].Offset: topics.ErrorTypeValidation,
		recs[5].Offset: topics.ErrorTypeValidation,
	}
	dead := readDLQ(t, e, topics.Registrations, 5)
	for _, r := range dead {
		off, err := strconv.ParseInt(dlq.Header(r, topics.HeaderSourceOffset), 10, 64)
		require.NoError(t, err)
		assert.Equal(t, topics.Registrations, dlq.Header(r, topics.HeaderSourceTopic))
		assert.NotEmpty(t, dlq.Header(r, topics.HeaderError))
		assert.Equal(t, "1", dlq.Header(r, topics.HeaderAttempts))
		_, err = time.Parse(time.RFC3339Nano, dlq.Header(r, topics.HeaderFailedAt))
		assert.NoError(t, err)
		if string(r.Key) == "ghost" {
			assert.Equal(t, topics.ErrorTypeValidation, dlq.Header(r, topics.HeaderErrorType))
			assert.Contains(t, dlq.Header(r, topics.HeaderError), "unknown item")
			assert.Equal(t, strconv.Itoa(int(recs[7].Partition)), dlq.Header(r, topics.HeaderSourcePartition))
			continue
		}
		assert.Equal(t, strconv.Itoa(int(recs[1].Partition)), dlq.Header(r, topics.HeaderSourcePartition))
		assert.Equal(t, want[off], dlq.Header(r, topics.HeaderErrorType), "offset %d: %s", off, dlq.Header(r, topics.HeaderError))
		delete(want, off)
		if off == recs[1].Offset {
			assert.Equal(t, recs[1].Value, r.Value, "the original bytes")
			assert.Equal(t, "abc", dlq.Header(r, "trace"), "original headers kept")
		}
	}
	assert.Empty(t, want, "every bad record of tix is in the DLQ")

	// A registration the line refused reports REJECTED, not PENDING forever.
	tok, err := e.signer.IssueQueue(token.Queue{TokenID: "tok-m", ItemID: "tix", UserID: "m", Partition: recs[5].Partition, Offset: recs[5].Offset}, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, "REJECTED", e.status("tix", tok).Status)
}

// A corrupt key of one item makes its records fail in Redis; they go to the
// DLQ as PROCESSING_ERROR and the other items, on the same partition or not,
// keep moving.
func TestPoisonedItemDoesNotBlockOthers(t *testing.T) {
	var states []topics.ItemState
	for _, id := range []string{"poison", "a", "b", "c", "d", "e", "f"} {
		states = append(states, item(id))
	}
	e := newEnv(t, states...)
	e.start() // the view is rebuilt (empty) first: corrupt the key after that
	require.NoError(t, e.rdb.Set(context.Background(), "wr:{poison}:users", "not a hash", 0).Err())
	e.register("poison", "p1")
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		e.register(id, "u1")
	}
	e.register("poison", "p2")
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		e.register(id, "u2")
		assert.Len(t, e.waitLine(id, 2), 2, id)
	}
	dead := readDLQ(t, e, topics.Registrations, 2)
	for _, r := range dead {
		assert.Equal(t, "poison", string(r.Key))
		assert.Equal(t, topics.ErrorTypeProcessing, dlq.Header(r, topics.HeaderErrorType))
		assert.Contains(t, dlq.Header(r, topics.HeaderError), "WRONGTYPE")
	}
}

// readDLQ reads dead letters of source from the start until it has n
// distinct ones (by source partition and offset) and returns those. Dead
// letters are at least once: a rebalance can redeliver a batch whose commit
// was refused, and its letters are written again.
func readDLQ(t *testing.T, e *env, source string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(topics.DLQ(source)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := map[string]bool{}
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "only %d of %d dead letters arrived", len(out), n)
		for _, r := range fs.Records() {
			src := dlq.Header(r, topics.HeaderSourcePartition) + "/" + dlq.Header(r, topics.HeaderSourceOffset)
			if !seen[src] {
				seen[src] = true
				out = append(out, r)
			}
		}
	}
	require.Len(t, out, n, "more distinct dead letters than bad records")
	return out
}
