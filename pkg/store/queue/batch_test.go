package queue_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// Apply runs an item's registrations in one enqueue.lua call each (up to
// queue.EnqueueBatch; Replay up to queue.ReplayBatch): the answers and the
// line are the same as applying
// every op alone, with leaves, marks, abandons, replays, duplicates, pooled,
// late and bypass registrations of three items mixed in one batch, from two
// partitions, and a record refused on a corrupt bypass count refused alone;
// a fourth item, w, has only anonymous registrations (the place key is the
// token: enqueue.lua's short form of arguments), some repeated.
func TestEnqueueBatchesMatchOneByOne(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	rng := rand.New(rand.NewPCG(7, 11))

	items := []string{"x", "y", "z", "w"}
	var ops []queue.Op
	offset := map[string]int64{}
	lastTok := map[string]string{} // item and user -> the user's last register's token
	for len(ops) < 2_400 {
		item := items[rng.IntN(len(items))]
		if rng.IntN(4) == 0 { // long runs of one item, past EnqueueBatch
			item = "x"
		}
		offset[item]++
		op := queue.Op{ItemID: item, Offset: offset[item], UserID: "u" + strconv.Itoa(rng.IntN(400)), Partition: int32(len(ops) / 300 % 2)}
		op.TokenID = "t-" + item + "-" + strconv.FormatInt(op.Offset, 10)
		if item == "w" {
			op.Kind, op.UserID, op.At = queue.OpRegister, op.TokenID, 1_000
			if rng.IntN(10) == 0 && op.Offset > 1 { // the same token again (a record produced twice)
				op.TokenID = "t-w-" + strconv.FormatInt(1+rng.Int64N(op.Offset-1), 10)
				op.UserID = op.TokenID
			}
			ops = append(ops, op)
			continue
		}
		switch r := rng.IntN(100); {
		case r < 6:
			op.Kind = queue.OpLeave // through a token of the user's: only its own place is left
			if tok, ok := lastTok[item+" "+op.UserID]; ok {
				op.TokenID = tok
			}
		case r < 9:
			op.Kind = queue.OpMark
		case r < 12:
			op.Kind = queue.OpAbandon
		default:
			op.Kind = queue.OpRegister
			lastTok[item+" "+op.UserID] = op.TokenID
			switch rng.IntN(20) {
			case 0:
				op.Window = 1_000 * int64(1+rng.IntN(3)) // pre-queued
			case 1:
				op.Bypass = &queue.BypassOp{Code: "staff", Count: 25}
			case 2:
				op.Bypass = &queue.BypassOp{Code: "bad", Count: 5} // its count is corrupt
			}
		}
		ops = append(ops, op)
	}
	ops = append(ops, ops[:50]...) // replays
	named := func(prefix string) []queue.Op {
		out := make([]queue.Op, len(ops))
		for i, op := range ops {
			op.ItemID = prefix + op.ItemID
			out[i] = op
		}
		return out
	}
	for _, it := range items {
		for _, prefix := range []string{"one-", "batch-", "replay-"} {
			require.NoError(t, rdb.HSet(ctx, queue.KeysFor(prefix+it).Bypass, "bad", "x").Err())
		}
	}

	var alone []queue.Result
	for _, op := range named("one-") {
		res, err := l.Apply(ctx, []queue.Op{op})
		require.NoError(t, err)
		alone = append(alone, res...)
	}
	together, err := l.Apply(ctx, named("batch-"))
	require.NoError(t, err)
	require.Len(t, together, len(alone))
	require.NoError(t, l.Load(ctx))
	replayed, err := l.Replay(ctx, named("replay-"))
	require.NoError(t, err)
	require.Len(t, replayed, len(alone))

	outcomes := map[queue.Outcome]int{}
	refused := 0
	for i := range alone {
		a, b, c := alone[i], together[i], replayed[i]
		if a.Err != nil {
			refused++
			require.Error(t, b.Err, "op %d", i)
			require.Error(t, c.Err, "op %d", i)
			assert.Equal(t, strings.ReplaceAll(a.Err.Error(), "one-", ""), strings.ReplaceAll(b.Err.Error(), "batch-", ""), "op %d", i)
			assert.Equal(t, strings.ReplaceAll(a.Err.Error(), "one-", ""), strings.ReplaceAll(c.Err.Error(), "replay-", ""), "op %d", i)
			assert.True(t, queue.IsRecordError(b.Err), "a refusal of the record, not an outage")
			continue
		}
		require.NoError(t, b.Err, "op %d", i)
		require.NoError(t, c.Err, "op %d", i)
		outcomes[a.Outcome]++
		require.Equal(t, a, b, "op %d (%+v)", i, ops[i])
		require.Equal(t, a, c, "op %d (%+v), replayed", i, ops[i])
	}
	for _, o := range []queue.Outcome{queue.Added, queue.Duplicate, queue.Replay, queue.PooledOne, queue.LateOne, queue.Left, queue.Marked} {
		assert.Positive(t, outcomes[o], "the batch exercised %s", o)
	}
	assert.Positive(t, refused, "the batch exercised a refused record")

	for _, it := range items {
		assert.Equal(t, contents(t, rdb, "one-"+it), contents(t, rdb, "batch-"+it), "item %s", it)
		assert.Equal(t, contents(t, rdb, "one-"+it), contents(t, rdb, "replay-"+it), "item %s, replayed", it)
	}
	// An anonymous place is kept under its token, and the token again is a duplicate.
	wOutcomes := map[queue.Outcome]int{}
	for i, op := range ops {
		if op.ItemID != "w" {
			continue
		}
		wOutcomes[together[i].Outcome]++
		if together[i].Outcome == queue.Added {
			assert.Equal(t, op.TokenID, rdb.HGet(ctx, queue.KeysFor("batch-w").Users, op.TokenID).Val(), "op %d", i)
		}
	}
	assert.Positive(t, wOutcomes[queue.Added], "w's registrations placed")
	assert.Positive(t, wOutcomes[queue.Duplicate], "w's repeated tokens found")
}

// contents reads every key of an item by its type, named without the item.
func contents(t *testing.T, rdb redis.UniversalClient, item string) map[string]any {
	ctx := context.Background()
	k := queue.KeysFor(item)
	out := map[string]any{}
	for _, key := range []string{k.Applied, k.Users, k.Seq, k.Waiting, k.Admitted, k.Pool, k.Late, k.Drawn, k.Express, k.Bypass, k.Stats, k.Seen} {
		typ, err := rdb.Type(ctx, key).Result()
		require.NoError(t, err)
		var v any
		switch typ {
		case "none":
		case "string":
			v, err = rdb.Get(ctx, key).Result()
		case "hash":
			v, err = rdb.HGetAll(ctx, key).Result()
		case "zset":
			v, err = rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
		default:
			t.Fatalf("%s: unexpected type %s", key, typ)
		}
		require.NoError(t, err)
		out[strings.TrimPrefix(key, "wr:{"+item+"}")] = v
	}
	return out
}

// Out of memory, Redis refuses a script's first write: an enqueue call whose
// writes are made at its end (registrations placed in the line), or whose
// first write is a record's own (a pre-queued one), writes nothing and fails
// as a whole with Redis's OOM (an outage: the consumer retries the batch),
// never answering a record as applied. (Through Apply the MULTI's SADD is
// refused first; the script is called here alone.)
func TestEnqueueOutOfMemoryWritesNothing(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.StartRedis(t).Client()
	l := queue.New(rdb)
	_, err := l.Apply(ctx, []queue.Op{
		{Kind: queue.OpRegister, ItemID: "m", TokenID: "a1", UserID: "a1", Offset: 1},
		{Kind: queue.OpRegister, ItemID: "m", TokenID: "a2", UserID: "a2", Offset: 2}})
	require.NoError(t, err)
	enqueue := redis.NewScript(queue.EnqueueSrcForTest)
	require.NoError(t, enqueue.Load(ctx, rdb).Err())
	k := queue.KeysFor("m")
	keys := []string{k.Applied, k.Users, k.Seq, k.Waiting, k.Admitted, k.Pool, k.Late, k.Drawn, k.Express, k.Bypass, k.Changes}
	for _, c := range []struct {
		name string
		args []any // offsets after those of the cases before: none is a replay
	}{
		{"line", queue.EnqueueArgsForTest([]queue.Op{
			{Kind: queue.OpRegister, ItemID: "m", TokenID: "a3", UserID: "a3", Offset: 3},
			{Kind: queue.OpRegister, ItemID: "m", TokenID: "a4", UserID: "a4", Offset: 4}})},
		{"pooled", queue.EnqueueArgsForTest([]queue.Op{
			{Kind: queue.OpRegister, ItemID: "m", TokenID: "a5", UserID: "a5", Offset: 5, Window: 1000},
			{Kind: queue.OpRegister, ItemID: "m", TokenID: "a6", UserID: "a6", Offset: 6}})},
	} {
		args := c.args
		t.Run(c.name, func(t *testing.T) {
			before := contents(t, rdb, "m")
			require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "1").Err())
			err := enqueue.EvalSha(ctx, rdb, keys, args...).Err()
			require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "0").Err())
			require.ErrorContains(t, err, "OOM")
			assert.False(t, queue.IsRecordError(err), "an outage, not a refusal of the records")
			assert.Equal(t, before, contents(t, rdb, "m"))
			res, err := enqueue.EvalSha(ctx, rdb, keys, args...).Slice()
			require.NoError(t, err)
			assert.NotEqual(t, int64(0), res[len(res)-1], "applied once memory is back, not a replay")
		})
	}
}

// One enqueue call of more records than a command takes arguments (its reads
// and writes go in chunks): each new token is placed in order, and a token
// seen earlier in the same call is its duplicate.
func TestEnqueueCallPastAChunk(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	enqueue := redis.NewScript(queue.EnqueueSrcForTest)
	k := queue.KeysFor("big")
	keys := []string{k.Applied, k.Users, k.Seq, k.Waiting, k.Admitted, k.Pool, k.Late, k.Drawn, k.Express, k.Bypass, k.Changes}
	const n = 3_000
	ops := make([]queue.Op, n)
	for i := range n {
		tok := "b" + strconv.Itoa(i)
		if i%10 == 9 {
			tok = "b" + strconv.Itoa(i-5) // the same token again
		}
		ops[i] = queue.Op{Kind: queue.OpRegister, ItemID: "big", TokenID: tok, UserID: tok, Offset: int64(i + 1)}
	}
	vals, err := enqueue.Run(ctx, rdb, keys, queue.EnqueueArgsForTest(ops)...).Slice()
	require.NoError(t, err)
	res, err := queue.EnqueueResultsForTest(vals, ops)
	require.NoError(t, err)
	seq := int64(0)
	seqOf := map[string]int64{}
	for i := range n {
		if i%10 == 9 {
			tok := "b" + strconv.Itoa(i-5)
			require.Equal(t, queue.Result{Outcome: queue.Duplicate, Seq: seqOf[tok], TokenID: tok}, res[i], "record %d", i)
			continue
		}
		seq++
		seqOf["b"+strconv.Itoa(i)] = seq
		require.Equal(t, queue.Result{Outcome: queue.Added, Seq: seq, TokenID: "b" + strconv.Itoa(i)}, res[i], "record %d", i)
	}
	card, err := rdb.ZCard(ctx, k.Waiting).Result()
	require.NoError(t, err)
	assert.Equal(t, seq, card)
	assert.Equal(t, strconv.FormatInt(seq, 10), rdb.Get(ctx, k.Seq).Val())
	assert.Equal(t, seq, rdb.HLen(ctx, k.Users).Val())
	assert.Equal(t, "b2998", rdb.HGet(ctx, k.Users, "b2998").Val())
	assert.Equal(t, strconv.Itoa(n), rdb.HGet(ctx, k.Applied, "0").Val())

	// Every token again, in a second call: those placed are read from the
	// first call's writes (the holders and seqs of every chunk), the others
	// are placed now.
	for i := range n {
		tok := "b" + strconv.Itoa(i)
		ops[i] = queue.Op{Kind: queue.OpRegister, ItemID: "big", TokenID: tok, UserID: tok, Offset: int64(n + 1 + i)}
	}
	vals, err = enqueue.Run(ctx, rdb, keys, queue.EnqueueArgsForTest(ops)...).Slice()
	require.NoError(t, err)
	res, err = queue.EnqueueResultsForTest(vals, ops)
	require.NoError(t, err)
	for i := range n {
		tok := "b" + strconv.Itoa(i)
		if s, ok := seqOf[tok]; ok {
			require.Equal(t, queue.Result{Outcome: queue.Duplicate, Seq: s, TokenID: tok}, res[i], "record %d", i)
			continue
		}
		seq++
		require.Equal(t, queue.Result{Outcome: queue.Added, Seq: seq, TokenID: tok}, res[i], "record %d", i)
	}

	// New tokens only: one run past a chunk, answered as one run.
	for i := range n {
		tok := "c" + strconv.Itoa(i)
		ops[i] = queue.Op{Kind: queue.OpRegister, ItemID: "big", TokenID: tok, UserID: tok, Offset: int64(2*n + 1 + i)}
	}
	vals, err = enqueue.Run(ctx, rdb, keys, queue.EnqueueArgsForTest(ops)...).Slice()
	require.NoError(t, err)
	assert.Equal(t, []any{int64(-n), seq + 1}, vals)
	res, err = queue.EnqueueResultsForTest(vals, ops)
	require.NoError(t, err)
	for i := range n {
		seq++
		require.Equal(t, queue.Result{Outcome: queue.Added, Seq: seq, TokenID: ops[i].TokenID}, res[i], "record %d", i)
	}
	assert.Equal(t, seq, rdb.ZCard(ctx, k.Waiting).Val())
	assert.Equal(t, strconv.FormatInt(seq, 10), rdb.Get(ctx, k.Seq).Val())
	assert.Equal(t, "c2999", rdb.HGet(ctx, k.Users, "c2999").Val())
}

// An applied offset that is not a number refuses each record of a call on
// its own, as a value (the bulk path of plain new records does not run on
// it), and nothing is written.
func TestEnqueueCorruptAppliedOffsetRefusesEachRecord(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	enqueue := redis.NewScript(queue.EnqueueSrcForTest)
	k := queue.KeysFor("bad-offset")
	keys := []string{k.Applied, k.Users, k.Seq, k.Waiting, k.Admitted, k.Pool, k.Late, k.Drawn, k.Express, k.Bypass, k.Changes}
	require.NoError(t, rdb.HSet(ctx, k.Applied, "0", "x").Err())
	res, err := enqueue.Run(ctx, rdb, keys, queue.EnqueueArgsForTest([]queue.Op{
		{Kind: queue.OpRegister, ItemID: "bad-offset", TokenID: "t1", UserID: "t1", Offset: 1},
		{Kind: queue.OpRegister, ItemID: "bad-offset", TokenID: "t2", UserID: "t2", Offset: 2}})...).Slice()
	require.NoError(t, err, "a record's error is a value, not the call's")
	require.Len(t, res, 6)
	for i := 0; i < 6; i += 3 {
		assert.Equal(t, "ERR", res[i], "record %d", i/3)
	}
	assert.Zero(t, rdb.Exists(ctx, k.Waiting, k.Users, k.Seq).Val(), "nothing written")
	assert.Equal(t, "x", rdb.HGet(ctx, k.Applied, "0").Val())
}

// A token that a record of a call places at the back of the line is in the
// line for the records after it in that call, also when it is the holder
// another record's place key already had (here an admitted token registered
// again under another user: the later record is a DUPLICATE of its new
// waiting place, seq included), as one by one.
func TestEnqueueCallSeesThePlacesItMade(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	for _, item := range []string{"one", "batch"} {
		k := queue.KeysFor(item)
		require.NoError(t, rdb.HSet(ctx, k.Users, "uB", "T1").Err())
		require.NoError(t, rdb.ZAdd(ctx, k.Admitted, redis.Z{Score: 1e15, Member: "T1"}).Err())
	}
	ops := func(item string) []queue.Op {
		return []queue.Op{
			{Kind: queue.OpRegister, ItemID: item, TokenID: "T0", UserID: "uZ", Offset: 1, At: 1_000},
			{Kind: queue.OpRegister, ItemID: item, TokenID: "T1", UserID: "uA", Offset: 2, At: 1_000},
			{Kind: queue.OpRegister, ItemID: item, TokenID: "T2", UserID: "uB", Offset: 3, At: 1_000},
			{Kind: queue.OpRegister, ItemID: item, TokenID: "T3", UserID: "uC", Offset: 4, At: 1_000},
		}
	}
	var alone []queue.Result
	for _, op := range ops("one") {
		res, err := l.Apply(ctx, []queue.Op{op})
		require.NoError(t, err)
		alone = append(alone, res...)
	}
	together, err := l.Apply(ctx, ops("batch"))
	require.NoError(t, err)
	assert.Equal(t, queue.Result{Outcome: queue.Duplicate, Seq: 2, TokenID: "T1"}, alone[2])
	assert.Equal(t, alone, together)
	assert.Equal(t, contents(t, rdb, "one"), contents(t, rdb, "batch"))
}

// A call whose offsets go back (a record delivered again behind a later one)
// answers the earlier offset REPLAY, as one by one: a record below the
// applied offset is never placed, whatever the records before it in the call.
func TestEnqueueCallOffsetsGoingBack(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	ops := func(item string) []queue.Op {
		return []queue.Op{
			{Kind: queue.OpRegister, ItemID: item, TokenID: "T5", UserID: "u5", Offset: 5},
			{Kind: queue.OpRegister, ItemID: item, TokenID: "T3", UserID: "u3", Offset: 3},
			{Kind: queue.OpRegister, ItemID: item, TokenID: "T6", UserID: "u6", Offset: 6},
		}
	}
	var alone []queue.Result
	for _, op := range ops("one") {
		res, err := l.Apply(ctx, []queue.Op{op})
		require.NoError(t, err)
		alone = append(alone, res...)
	}
	together, err := l.Apply(ctx, ops("batch"))
	require.NoError(t, err)
	assert.Equal(t, queue.Replay, alone[1].Outcome)
	assert.Equal(t, alone, together)
	assert.Equal(t, contents(t, rdb, "one"), contents(t, rdb, "batch"))
}

// The scores an enqueue call writes are the seqs it answers, past each
// hundred, from below 100 on and past 10^15 (enqueue.lua writes a score as
// its hundreds and two digits in between), in calls of many new
// registrations and in calls of one.
func TestEnqueueScoresAreTheSeqs(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	for _, c := range []struct {
		item  string
		start int64
		batch int
	}{{"from0", 0, 250}, {"from95", 95, 250}, {"one", 95, 1}, {"big", 99_999_899, 250}, {"past1e15", 999_999_999_999_950, 250}} {
		k := queue.KeysFor(c.item)
		require.NoError(t, rdb.Set(ctx, k.Seq, c.start, 0).Err())
		var ops []queue.Op
		for i := range 300 {
			tok := c.item + "-" + strconv.Itoa(i)
			ops = append(ops, queue.Op{Kind: queue.OpRegister, ItemID: c.item, TokenID: tok, UserID: tok, Offset: int64(i)})
		}
		for lo := 0; lo < len(ops); lo += c.batch {
			res, err := l.Apply(ctx, ops[lo:min(lo+c.batch, len(ops))])
			require.NoError(t, err)
			for j, r := range res {
				i := lo + j
				require.Equal(t, queue.Added, r.Outcome, "%s record %d", c.item, i)
				require.Equal(t, c.start+1+int64(i), r.Seq, "%s record %d", c.item, i)
			}
		}
		got, err := rdb.ZRangeWithScores(ctx, k.Waiting, 0, -1).Result()
		require.NoError(t, err)
		require.Len(t, got, len(ops))
		for i, z := range got {
			require.Equal(t, ops[i].TokenID, z.Member, "%s place %d", c.item, i)
			require.Equal(t, float64(c.start+1+int64(i)), z.Score, "%s place %d", c.item, i)
		}
	}
}
