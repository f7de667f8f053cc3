package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// Each admission promote writes carries the item's applied registrations
// offsets at the moment it was decided and its expiry, until it is published:
// two ticks left unpublished keep their own decision points.
func TestPromoteMarksEachAdmissionWithItsDecisionPoint(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "m", 10, 0, 60, 5) // offsets 0..4 applied on partition 0
	t0 := time.UnixMilli(1_800_000_000_000)
	tk, err := l.Promote(ctx, "m", 1, t0, 200*time.Millisecond) // a budget of 2
	require.NoError(t, err)
	require.Equal(t, []string{"t00000", "t00001"}, tk.Unpublished)
	for _, a := range tk.Admits {
		assert.Equal(t, map[int32]int64{0: 4}, a.Applied)
		assert.Equal(t, t0.UnixMilli()+60_000, a.ExpiresAt)
	}

	_, err = l.Apply(ctx, []queue.Op{reg("m", "t00005", "u5", 5), reg("m", "t00006", "u6", 6)})
	require.NoError(t, err)
	t1 := t0.Add(200 * time.Millisecond)
	tk, err = l.Promote(ctx, "m", 1, t1, 200*time.Millisecond) // nothing was acknowledged
	require.NoError(t, err)
	require.Equal(t, []string{"t00000", "t00001", "t00002", "t00003"}, tk.Unpublished)
	want := []map[int32]int64{{0: 4}, {0: 4}, {0: 6}, {0: 6}}
	for i, a := range tk.Admits {
		assert.Equal(t, want[i], a.Applied, a.Token)
	}
	assert.Equal(t, t1.UnixMilli()+60_000, tk.Admits[3].ExpiresAt)

	page, err := l.AdmitPage(ctx, "m", 10)
	require.NoError(t, err)
	assert.Equal(t, tk.Admits, page)
	require.NoError(t, l.AckPublished(ctx, 1, []string{"m"}, []int{3}))
	left, err := l.Unpublished(ctx, "m", 10)
	require.NoError(t, err)
	assert.Equal(t, []string{"t00003"}, left)
}

// An admission replayed from its event (apply_admission.lua) leaves the line
// exactly as promote left it: the same function writes both. A republished
// event admits nobody again.
func TestApplyAdmissionWritesWhatPromoteWrote(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	require.NoError(t, l.Load(ctx))
	for _, it := range []string{"live", "replay"} {
		_, err := l.ApplyItem(ctx, topics.ItemState{ItemID: it, Stock: -1, Enabled: true, Version: 1,
			Policy: topics.AdmissionPolicy{RatePerSecond: 3, SessionTTLSeconds: 90}})
		require.NoError(t, err)
		ops := []queue.Op{}
		for i := range 8 {
			op := reg(it, fmt.Sprintf("t%d", i), fmt.Sprintf("u%d", i), int64(i))
			if i == 5 { // a bypass place: admitted first, the head does not move for it
				op.Bypass = &queue.BypassOp{Code: "B", Count: 1}
			}
			ops = append(ops, op)
		}
		res, err := l.Apply(ctx, ops)
		require.NoError(t, err)
		for _, r := range res {
			require.Equal(t, queue.Added, r.Outcome)
		}
	}
	now := time.UnixMilli(1_800_000_000_000)
	tk, err := l.Promote(ctx, "live", 1, now, time.Second)
	require.NoError(t, err)
	require.Equal(t, []string{"t5", "t0", "t1", "t2"}, tk.Unpublished, "the express place first, then 3 of the rate")
	op := queue.Op{Kind: queue.OpAdmit, ItemID: "replay", At: now.UnixMilli()}
	for _, a := range tk.Admits {
		op.Admitted, op.ExpiresAt = append(op.Admitted, a.Token), append(op.ExpiresAt, a.ExpiresAt)
	}
	res, err := l.Apply(ctx, []queue.Op{op})
	require.NoError(t, err)
	assert.Equal(t, queue.Result{Outcome: "ADMITTED", Seq: 4}, res[0])

	snap := func(item string) map[string]any {
		k := queue.KeysFor(item)
		w, _ := rdb.ZRangeWithScores(ctx, k.Waiting, 0, -1).Result()
		a, _ := rdb.ZRangeWithScores(ctx, k.Admitted, 0, -1).Result()
		x, _ := rdb.ZRangeWithScores(ctx, k.Express, 0, -1).Result()
		h, _ := rdb.Get(ctx, k.Head).Result()
		p, _ := rdb.LRange(ctx, k.Paced, 0, -1).Result()
		s, _ := rdb.HGet(ctx, k.Pace, "sum60").Result()
		return map[string]any{"waiting": w, "admitted": a, "express": x, "head": h, "paced": p, "sum60": s}
	}
	live := snap("live")
	assert.Equal(t, "3", live["head"])
	assert.Equal(t, live, snap("replay"))

	res, err = l.Apply(ctx, []queue.Op{op}) // republished: at least once
	require.NoError(t, err)
	assert.Equal(t, int64(0), res[0].Seq, "nobody admitted twice")
	after := snap("replay")
	assert.Equal(t, live["admitted"], after["admitted"])
	assert.Equal(t, live["waiting"], after["waiting"])
}

// An event written before expiries were on it admits for the item's session
// TTL from the event's time, as promote did; the event drops admissions that
// had expired by its time, as that tick's promote did.
func TestApplyAdmissionWithoutExpiries(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	setupItem(t, l, "old", 10, 0, 45, 3)
	k := queue.KeysFor("old")
	require.NoError(t, rdb.ZAdd(ctx, k.Admitted, redis.Z{Score: 999, Member: "gone"}).Err())
	_, err := l.Apply(ctx, []queue.Op{{Kind: queue.OpAdmit, ItemID: "old", At: 1000, Admitted: []string{"t00000", "t00001"}}})
	require.NoError(t, err)
	adm, err := rdb.ZRangeWithScores(ctx, k.Admitted, 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, []redis.Z{{Score: 46_000, Member: "t00000"}, {Score: 46_000, Member: "t00001"}}, adm)
}
