package queue_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// sizes are the sizes every bounded path is tested at: one, either side of
// Lua's stack limit (~8,000), one whole slice and page (20,000: promote's
// page is then every entry the slice pushed), and far past it. 500,000 is
// left out under -short.
func sizes(t *testing.T) []int {
	if testing.Short() {
		return []int{1, 7_999, 8_000, queue.MaxAdmitPerCall, 100_000}
	}
	return []int{1, 7_999, 8_000, queue.MaxAdmitPerCall, 100_000, 500_000}
}

func tokenOf(i int) string { return fmt.Sprintf("tok-%07d", i) }

// fill puts n tokens straight into item's waiting set (seq 1..n).
func fill(t testing.TB, rdb redis.UniversalClient, item string, n int) {
	ctx := context.Background()
	k := queue.KeysFor(item)
	for lo := 0; lo < n; lo += 10_000 {
		zs := make([]redis.Z, 0, 10_000)
		for i := lo; i < min(lo+10_000, n); i++ {
			zs = append(zs, redis.Z{Score: float64(i + 1), Member: tokenOf(i)})
		}
		require.NoError(t, rdb.ZAdd(ctx, k.Waiting, zs...).Err())
	}
	require.NoError(t, rdb.SAdd(ctx, queue.ActiveItems, item).Err())
}

// One tick admits everyone its budget allows, however many: in line order,
// all of them on the unpublished list, the budget charged for all.
func TestPromoteTickOfAnySize(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	for _, n := range sizes(t) {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			item := "big-" + strconv.Itoa(n)
			_, err := l.ApplyItem(ctx, topics.ItemState{ItemID: item, Stock: -1, Enabled: true, Version: 1,
				Policy: topics.AdmissionPolicy{RatePerSecond: float64(n), SessionTTLSeconds: 600}})
			require.NoError(t, err)
			fill(t, rdb, item, n+5) // five more than the budget: they stay
			now := time.UnixMilli(1_800_000_000_000)

			tk, err := l.Promote(ctx, item, 1, now, time.Second)
			require.NoError(t, err)
			assert.Equal(t, n, tk.Admitted)
			assert.False(t, tk.More)
			assert.Equal(t, int64(n), tk.Head)
			assert.Equal(t, int64(5), tk.Waiting)
			assert.Equal(t, int64(n), tk.Active)
			assert.Equal(t, int64(n), tk.UnpublishedTotal)
			require.Len(t, tk.Unpublished, min(n, queue.UnpublishedPage))
			for i, id := range tk.Unpublished {
				require.Equal(t, tokenOf(i), id)
			}

			k := queue.KeysFor(item)
			unpub, err := rdb.LRange(ctx, k.Unpublished, 0, -1).Result()
			require.NoError(t, err)
			require.Len(t, unpub, n)
			for i, e := range unpub {
				id, _, _ := strings.Cut(e, "\t") // tokenId, expiry, applied offsets
				require.Equal(t, tokenOf(i), id, "unpublished in admission order")
			}
			adm, err := rdb.ZRangeWithScores(ctx, k.Admitted, 0, -1).Result()
			require.NoError(t, err)
			require.Len(t, adm, n)
			for _, z := range adm {
				require.Equal(t, float64(now.Add(600*time.Second).UnixMilli()), z.Score)
			}
			st, err := l.Stats(ctx, item)
			require.NoError(t, err)
			assert.Equal(t, int64(n), st.AdmittedLastMinute, "the pace is charged for everyone")
			tokens, err := rdb.HGet(ctx, k.Pace, "tokens").Float64()
			require.NoError(t, err)
			assert.InDelta(t, 0, tokens, 1e-6, "the budget is spent")

			// The budget is spent: the same instant admits nobody more.
			tk, err = l.Promote(ctx, item, 1, now, time.Second)
			require.NoError(t, err)
			assert.Zero(t, tk.Admitted)

			// Paging the unpublished list: acknowledge a page, read the next.
			require.NoError(t, l.AckPublished(ctx, 1, []string{item}, []int{len(tk.Unpublished)}))
			rest, err := l.Unpublished(ctx, item, queue.UnpublishedPage)
			require.NoError(t, err)
			require.Len(t, rest, min(n-len(tk.Unpublished), queue.UnpublishedPage))
			if len(rest) > 0 {
				assert.Equal(t, tokenOf(len(tk.Unpublished)), rest[0])
			}
		})
	}
}

// A tick bigger than MaxAdmitPerCall runs as slices: one slice, then
// PromoteMany finishes the tick by itself.
func TestPromoteSlicesABigTick(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	n := 2*queue.MaxAdmitPerCall + 7
	for _, it := range []string{"s1", "s2"} {
		_, err := l.ApplyItem(ctx, topics.ItemState{ItemID: it, Stock: -1, Enabled: true, Version: 1,
			Policy: topics.AdmissionPolicy{RatePerSecond: float64(n), SessionTTLSeconds: 600}})
		require.NoError(t, err)
	}
	fill(t, rdb, "s1", n)
	fill(t, rdb, "s2", 3)
	ticks, errs, err := l.PromoteMany(ctx, []string{"s1", "s2"}, 1, time.Now(), time.Second)
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	assert.Equal(t, n, ticks[0].Admitted)
	assert.Equal(t, int64(n), ticks[0].UnpublishedTotal)
	assert.Equal(t, 3, ticks[1].Admitted)
	paced, err := rdb.LRange(ctx, queue.KeysFor("s1").Paced, 0, -1).Result()
	require.NoError(t, err)
	assert.Len(t, paced, 3, "three slices, each charged on its own")
}

// A script refused on a corrupt key leaves nothing behind: every key is read
// before the first write.
func TestScriptsWriteNothingWhenRefused(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	snapshot := func(item string) map[string]string {
		k := queue.KeysFor(item)
		return dumpKeys(t, rdb, k.Seq, k.Waiting, k.Admitted, k.Users, k.Head, k.State, k.Applied, k.Epoch, k.Pace, k.Paced, k.Unpublished)
	}

	t.Run("promote", func(t *testing.T) {
		setupItem(t, l, "p", 100_000, 0, 60, 0)
		fill(t, rdb, "p", 9_000)
		require.NoError(t, rdb.Set(ctx, queue.KeysFor("p").Unpublished, "corrupt", 0).Err())
		before := snapshot("p")
		_, err := l.Promote(ctx, "p", 3, time.Now(), time.Second)
		require.ErrorContains(t, err, "WRONGTYPE")
		assert.Equal(t, before, snapshot("p"))
	})
	t.Run("enqueue", func(t *testing.T) {
		setupItem(t, l, "e", 10, 0, 60, 2)
		require.NoError(t, rdb.Set(ctx, queue.KeysFor("e").Admitted, "corrupt", 0).Err())
		before := snapshot("e")
		res, err := l.Apply(ctx, []queue.Op{reg("e", "new", "unew", 100)})
		require.NoError(t, err)
		require.ErrorContains(t, res[0].Err, "WRONGTYPE")
		assert.Equal(t, before, snapshot("e"))
		require.NoError(t, rdb.Set(ctx, queue.KeysFor("e").Seq, "x", 0).Err())
		require.NoError(t, rdb.Del(ctx, queue.KeysFor("e").Admitted).Err())
		before = snapshot("e")
		res, err = l.Apply(ctx, []queue.Op{reg("e", "new", "unew", 100)})
		require.NoError(t, err)
		require.ErrorContains(t, res[0].Err, "corrupt")
		assert.Equal(t, before, snapshot("e"))
	})
	t.Run("leave", func(t *testing.T) {
		setupItem(t, l, "lv", 10, 0, 60, 2)
		require.NoError(t, rdb.Set(ctx, queue.KeysFor("lv").Admitted, "corrupt", 0).Err())
		before := snapshot("lv")
		res, err := l.Apply(ctx, []queue.Op{{Kind: queue.OpLeave, ItemID: "lv", TokenID: "t00000", UserID: "u0", Offset: 100}})
		require.NoError(t, err)
		require.ErrorContains(t, res[0].Err, "WRONGTYPE")
		assert.Equal(t, before, snapshot("lv"))
	})
	t.Run("complete", func(t *testing.T) {
		setupItem(t, l, "c", 10, 0, 60, 2)
		_, err := tick(t, l, "c", 1, time.Now(), time.Second)
		require.NoError(t, err)
		require.NoError(t, rdb.Set(ctx, queue.KeysFor("c").Users, "corrupt", 0).Err())
		before := snapshot("c")
		_, err = l.Complete(ctx, "c", "t00000", "u0")
		require.ErrorContains(t, err, "WRONGTYPE")
		assert.Equal(t, before, snapshot("c"))
	})
}

// A flushed script cache (a restart, a failover, SCRIPT FLUSH) between or
// amid calls loses nothing: Apply loads its scripts in the transaction, so
// no op runs while another of the same batch answers NOSCRIPT. Before, a
// batch whose mark ran (its script loaded by someone else) and whose register
// did not was run again whole, and the register answered REPLAY: lost.
func TestFlushedScriptsLoseNothing(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	setupItem(t, l, "n", 1000, 0, 60, 0)
	markOnly := func() {
		require.NoError(t, rdb.ScriptFlush(ctx).Err())
		// Another process loads one script only (as Script.Run does).
		require.NoError(t, rdb.Do(ctx, "SCRIPT", "LOAD", queue.MarkSrcForTest).Err())
	}
	off := int64(0)
	var want []string
	for round := range 5 {
		markOnly()
		var ops []queue.Op
		for i := range 3 {
			tok := fmt.Sprintf("r%d-%d", round, i)
			ops = append(ops, reg("n", tok, "u"+tok, off), queue.Op{Kind: queue.OpMark, ItemID: "n", Offset: off + 1})
			want = append(want, tok)
			off += 2
		}
		res, err := l.Apply(ctx, ops)
		require.NoError(t, err)
		for i, r := range res {
			if i%2 == 0 {
				require.Equal(t, queue.Added, r.Outcome, "round %d op %d", round, i)
			} else {
				require.Equal(t, queue.Marked, r.Outcome, "round %d op %d", round, i)
			}
		}
	}
	line, err := l.Waiting(ctx, "n", 0)
	require.NoError(t, err)
	assert.Equal(t, want, line)

	// Promote and ack reload by themselves, too.
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	ticks, errs, err := l.PromoteMany(ctx, []string{"n"}, 1, time.Now(), time.Second)
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.Equal(t, len(want), ticks[0].Admitted)
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	require.NoError(t, l.AckPublished(ctx, 1, []string{"n"}, []int{len(want)}))
	rest, err := l.Unpublished(ctx, "n", 100)
	require.NoError(t, err)
	assert.Empty(t, rest)
}

// Apply takes batches of any size, in order, in bounded transactions.
func TestApplyBatchOfAnySize(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	for _, n := range sizes(t) {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			item := "a-" + strconv.Itoa(n)
			ops := make([]queue.Op, n)
			for i := range ops {
				ops[i] = reg(item, tokenOf(i), "u"+strconv.Itoa(i), int64(i))
			}
			res, err := l.Apply(ctx, ops)
			require.NoError(t, err)
			require.Len(t, res, n)
			for i, r := range res {
				require.Equal(t, queue.Result{Outcome: queue.Added, Seq: int64(i + 1), TokenID: tokenOf(i)}, r)
			}
			card, err := rdb.ZCard(ctx, queue.KeysFor(item).Waiting).Result()
			require.NoError(t, err)
			assert.Equal(t, int64(n), card)
		})
	}
}

// A chunk of one script runs without SCRIPT LOAD; after a flush, or with
// another process's scripts cached but not its own, it loads and runs again,
// losing nothing.
func TestOneScriptChunksReloadAfterAFlush(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	if _, ok := rdb.(*redis.ClusterClient); ok {
		t.Skip("on a Redis Cluster every call carries its script's text (EVAL): nothing is loaded")
	}
	l := queue.New(rdb)
	loads := func() int64 {
		info, err := rdb.Info(ctx, "commandstats").Result()
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_script|load:calls="); ok {
				n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				require.NoError(t, err)
				return n
			}
		}
		return 0
	}
	var want []string
	for round := range 4 {
		if round%2 == 1 {
			require.NoError(t, rdb.ScriptFlush(ctx).Err())
			require.NoError(t, rdb.Do(ctx, "SCRIPT", "LOAD", queue.MarkSrcForTest).Err())
		}
		before := loads()
		var ops []queue.Op
		for i := range 5 {
			tok := fmt.Sprintf("o%d-%d", round, i)
			ops = append(ops, reg("one", tok, "u"+tok, int64(round*5+i)))
			want = append(want, tok)
		}
		res, err := l.Apply(ctx, ops)
		require.NoError(t, err)
		for i, r := range res {
			require.Equal(t, queue.Added, r.Outcome, "round %d op %d", round, i)
		}
		if round%2 == 1 {
			assert.Equal(t, before+1, loads(), "round %d: loaded once, after the NOSCRIPT", round)
		} else if round > 0 {
			assert.Equal(t, before, loads(), "round %d: cached, no SCRIPT LOAD", round)
		}
	}
	line, err := l.Waiting(ctx, "one", 0)
	require.NoError(t, err)
	assert.Equal(t, want, line)
}

// dumpKeys is each key's DUMP ("<none>" for a missing key): equal dumps
// before and after a refused call mean it wrote nothing to them.
func dumpKeys(t testing.TB, rdb redis.Cmdable, keys ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, key := range keys {
		v, err := rdb.Dump(context.Background(), key).Result()
		if err == redis.Nil {
			v = "<none>"
		} else {
			require.NoError(t, err)
		}
		out[key] = v
	}
	return out
}
