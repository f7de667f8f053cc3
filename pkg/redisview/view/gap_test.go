package view_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/fence"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// gapPart is the admissions partition the tests write to (partition 0 stays
// empty).
const gapPart = 1

// txnClient is a shard leader's transactional producer of partition gapPart.
func txnClient(t *testing.T, base []kgo.Opt, id string, timeout time.Duration) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, base...), kgo.TransactionalID(id), kgo.TransactionTimeout(timeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// admission is an admission event of partition gapPart.
func admission(v string) *kgo.Record {
	return &kgo.Record{Topic: topics.Admissions, Partition: gapPart, Key: []byte("item"), Value: []byte(v)}
}

// lso is the last stable offset of partition gapPart.
func lso(t *testing.T, ctx context.Context, adm *kadm.Client) int64 {
	t.Helper()
	l, err := adm.ListCommittedOffsets(ctx, topics.Admissions)
	require.NoError(t, err)
	o, ok := l.Lookup(topics.Admissions, gapPart)
	require.True(t, ok)
	require.NoError(t, o.Err)
	return o.Offset
}

// newGroup makes the registrations consumer group "g" the record reads
// (nothing consumed yet).
func newGroup(t *testing.T, ctx context.Context, adm *kadm.Client) {
	t.Helper()
	var o kadm.Offsets
	o.AddOffset(topics.Registrations, 0, 0, -1)
	_, err := adm.CommitOffsets(ctx, "g", o)
	require.NoError(t, err)
}

// judged is the verdict of w on the record as it stands now: two checks,
// the second after the record's grace, so the topic's ends of now are
// gapEnv is a Redis, the client options for brokers, a client and its admin,
// with the registrations group committed at nothing.
func gapEnv(t *testing.T, ctx context.Context, brokers []string) (redis.UniversalClient, []kgo.Opt, *kgo.Client, *kadm.Client) {
	t.Helper()
	rdb := testenv.Redis(t)
	base := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	admCl, err := kgo.NewClient(base...)
	require.NoError(t, err)
	t.Cleanup(admCl.Close)
	adm := kadm.NewClient(admCl)
	newGroup(t, ctx, adm)
	return rdb, base, admCl, adm
}

// compared with the marker.
func judged(t *testing.T, ctx context.Context, w *view.Watcher, grace time.Duration) view.Status {
	t.Helper()
	w.Check(ctx)
	time.Sleep(grace + 20*time.Millisecond)
	return w.Check(ctx)
}

// A leader fenced mid-transaction (a rebuild's Fence, or a new leader
// taking its id) leaves an abort marker at the end of its partition, past
// the view's marker (itself short of the commit marker before): the view is
// not older than the record, and stays
// trusted on later checks. A committed admission the view missed still makes
// it older than the record, also behind an abort marker.
func TestRecordPassesOverAbortMarkersNotMissedAdmissions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rdb, base, admCl, adm := gapEnv(t, ctx, testenv.Kafka(t, 2))
	field := view.Field(topics.Admissions, gapPart)

	// A leader's committed tick, applied; the marker advanced past its event
	// but short of its commit marker (the wait for the last stable offset ran out).
	id := fence.ID("t", 0)
	leader := txnClient(t, base, id, fence.Timeout)
	require.NoError(t, leader.BeginTransaction())
	require.NoError(t, leader.ProduceSync(ctx, admission("applied")).FirstErr())
	require.NoError(t, leader.EndTransaction(ctx, kgo.TryCommit))
	applied := lso(t, ctx, adm)
	require.Equal(t, int64(2), applied, "one event and its commit marker")
	require.NoError(t, view.SetReady(ctx, rdb, "g1", map[string]int64{field: applied - 1}, time.Now()))

	// The leader dies mid-transaction; a rebuild fences its id.
	require.NoError(t, leader.BeginTransaction())
	require.NoError(t, leader.ProduceSync(ctx, admission("aborted")).FirstErr())
	require.NoError(t, fence.Fence(ctx, admCl, fence.IDs("t")...))
	require.Equal(t, applied+2, lso(t, ctx, adm), "the aborted event and its abort marker")

	const grace = 100 * time.Millisecond
	plain := view.NewWatcher(rdb, view.Options{Record: view.NewKafkaRecord(adm, "g", grace)}, nil, zaptest.NewLogger(t))
	st := judged(t, ctx, plain, grace)
	require.False(t, st.Trusted, "without reading the gap, the abort marker looks like a missed admission")
	require.Equal(t, "behind", st.Cause)

	rec := view.NewKafkaRecord(adm, "g", grace).ReadGaps(base)
	w := view.NewWatcher(rdb, view.Options{Record: rec}, nil, zaptest.NewLogger(t))
	st = judged(t, ctx, w, grace)
	require.True(t, st.Trusted, "an abort marker is no missed admission: %+v", st)
	require.True(t, w.Check(ctx).Trusted, "and later checks (what was read is remembered)")

	// A committed admission the marker was not advanced past (a client's, or
	// a leader that died between its commit and its advance).
	other := txnClient(t, base, fence.ID("t", 1), fence.Timeout)
	require.NoError(t, other.BeginTransaction())
	require.NoError(t, other.ProduceSync(ctx, admission("missed")).FirstErr())
	require.NoError(t, other.EndTransaction(ctx, kgo.TryCommit))
	st = judged(t, ctx, w, grace)
	require.False(t, st.Trusted, "a missed admission behind the abort marker makes the view older than the record")
	require.Equal(t, "behind", st.Cause)
	require.Contains(t, st.Reason, field)

	// Once applied (the marker past it), the view is trusted again.
	require.NoError(t, view.Advance(ctx, rdb, topics.Admissions, gapPart, lso(t, ctx, adm)).Err())
	require.True(t, judged(t, ctx, w, grace).Trusted)
}

// A leader that dies mid-transaction and is never fenced: the coordinator
// aborts its transaction after the transaction timeout and writes the abort
// marker itself. Until then the last stable offset holds before the open
// transaction (nothing to apply); after, the marker is past the view's, and
// the view stays trusted throughout.
func TestRecordPassesOverATimedOutTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rdb, base, _, adm := gapEnv(t, ctx, testenv.Kafka(t, 2))
	require.NoError(t, view.SetReady(ctx, rdb, "g1", map[string]int64{view.Field(topics.Admissions, gapPart): 0}, time.Now()))

	const timeout = time.Second
	dead := txnClient(t, base, fence.ID("t", 0), timeout)
	require.NoError(t, dead.BeginTransaction())
	require.NoError(t, dead.ProduceSync(ctx, admission("never committed")).FirstErr())
	// The leader is gone: its client sends nothing more.

	const grace = 100 * time.Millisecond
	w := view.NewWatcher(rdb, view.Options{Record: view.NewKafkaRecord(adm, "g", grace).ReadGaps(base)}, nil, zaptest.NewLogger(t))
	require.True(t, judged(t, ctx, w, grace).Trusted, "open: nothing stable to apply")
	require.Eventually(t, func() bool { return lso(t, ctx, adm) == 2 }, 20*time.Second, 50*time.Millisecond,
		"the coordinator aborts the transaction after its timeout")
	st := judged(t, ctx, w, grace)
	require.True(t, st.Trusted, "the coordinator's abort marker is no missed admission: %+v", st)
}

// The record reads Kafka only for a view that looks behind: none while the
// marker is at the topic's end, one for an abort marker past it, and none
// at the checks after (what was found empty is remembered).
func TestRecordReadsOnlyWhatTheViewLooksBehindBy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	require.NoError(t, testenv.EnsureTopics(brokers, 2))
	var fetches atomic.Int64
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		fetches.Add(1)
		return nil, nil, false // counted, then served
	})
	rdb, base, admCl, adm := gapEnv(t, ctx, brokers)

	leader := txnClient(t, base, fence.ID("t", 0), fence.Timeout)
	require.NoError(t, leader.BeginTransaction())
	require.NoError(t, leader.ProduceSync(ctx, admission("applied")).FirstErr())
	require.NoError(t, leader.EndTransaction(ctx, kgo.TryCommit))
	require.NoError(t, view.SetReady(ctx, rdb, "g1", map[string]int64{view.Field(topics.Admissions, gapPart): lso(t, ctx, adm)}, time.Now()))

	const grace = 100 * time.Millisecond
	w := view.NewWatcher(rdb, view.Options{Record: view.NewKafkaRecord(adm, "g", grace).ReadGaps(base)}, nil, zaptest.NewLogger(t))
	require.True(t, judged(t, ctx, w, grace).Trusted)
	require.True(t, judged(t, ctx, w, grace).Trusted)
	require.Zero(t, fetches.Load(), "the marker at the end: nothing read")

	require.NoError(t, leader.BeginTransaction())
	require.NoError(t, leader.ProduceSync(ctx, admission("aborted")).FirstErr())
	require.NoError(t, fence.Fence(ctx, admCl, fence.ID("t", 0)))
	require.True(t, judged(t, ctx, w, grace).Trusted)
	read := fetches.Load()
	require.Positive(t, read, "the offsets past the marker read")
	require.True(t, judged(t, ctx, w, grace).Trusted)
	require.True(t, judged(t, ctx, w, grace).Trusted)
	require.Equal(t, read, fetches.Load(), "read once")
}

// A leader whose link to Redis failed after its commit leaves a committed
// tick past the view's marker although the view holds its admissions: with
// HeldTicks the record passes over it (no whole rebuild for an advance that
// did not happen). The same tick whose token waits in the line again (a
// view rolled back to before it), or whose epoch the item has not seen,
// still makes the view older than the record.
func TestRecordPassesOverATickTheViewHolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rdb, base, _, adm := gapEnv(t, ctx, testenv.Kafka(t, 2))
	field := view.Field(topics.Admissions, gapPart)
	k := queue.KeysFor("item")
	require.NoError(t, rdb.Set(ctx, k.Epoch, 7, 0).Err())
	require.NoError(t, rdb.ZAdd(ctx, k.Waiting, redis.Z{Score: 2, Member: "behind-a"}).Err())
	require.NoError(t, view.SetReady(ctx, rdb, "g1", map[string]int64{field: 0}, time.Now()))

	const until = int64(1_900_000_000_000)
	tick := func(epoch int64, toks ...string) string {
		exps := make([]int64, len(toks))
		for i := range exps {
			exps[i] = until
		}
		return string(topics.Encode(&topics.AdmissionEvent{V: topics.Version, ItemID: "item", Admitted: toks, ExpiresAt: exps, Epoch: epoch, At: time.Now().UnixMilli()}))
	}
	leader := txnClient(t, base, fence.ID("h", 0), fence.Timeout)
	commit := func(v string) {
		t.Helper()
		require.NoError(t, leader.BeginTransaction())
		require.NoError(t, leader.ProduceSync(ctx, admission(v)).FirstErr())
		require.NoError(t, leader.EndTransaction(ctx, kgo.TryCommit))
	}
	const grace = 100 * time.Millisecond
	newWatcher := func() *view.Watcher {
		rec := view.NewKafkaRecord(adm, "g", grace).ReadGaps(base).Reflects(view.HeldTicks(queue.New(rdb)))
		return view.NewWatcher(rdb, view.Options{Record: rec}, nil, zaptest.NewLogger(t))
	}

	require.NoError(t, rdb.ZAdd(ctx, k.Admitted, redis.Z{Score: float64(until), Member: "a"}).Err())
	commit(tick(7, "a", "done")) // a is admitted until the tick's expiry, done has completed since
	st := judged(t, ctx, newWatcher(), grace)
	require.True(t, st.Trusted, "a tick the view holds is no missed admission: %+v", st)

	require.NoError(t, view.Advance(ctx, rdb, topics.Admissions, gapPart, lso(t, ctx, adm)).Err())
	require.NoError(t, rdb.ZAdd(ctx, k.Admitted, redis.Z{Score: float64(until + 5000), Member: "again"}).Err())
	commit(tick(7, "again")) // admitted, but until another expiry: a later tick's admission
	st = judged(t, ctx, newWatcher(), grace)
	require.False(t, st.Trusted, "a token admitted until another expiry than the tick's is not the tick's")
	require.Equal(t, "behind", st.Cause)
	require.NoError(t, view.Advance(ctx, rdb, topics.Admissions, gapPart, lso(t, ctx, adm)).Err())

	commit(tick(7, "behind-a")) // its token waits in the line: the view lacks it
	st = judged(t, ctx, newWatcher(), grace)
	require.False(t, st.Trusted, "a tick whose token still waits is missed")
	require.Equal(t, "behind", st.Cause)

	require.NoError(t, view.Advance(ctx, rdb, topics.Admissions, gapPart, lso(t, ctx, adm)).Err())
	commit(tick(9, "b")) // an epoch the item has not seen
	st = judged(t, ctx, newWatcher(), grace)
	require.False(t, st.Trusted, "a tick of an epoch the view has not seen is missed")
	require.Contains(t, st.Reason, field)
}
