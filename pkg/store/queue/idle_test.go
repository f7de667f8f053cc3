package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

func abandon(item, tok, user string, off int64) queue.Op {
	return queue.Op{Kind: queue.OpAbandon, ItemID: item, TokenID: tok, UserID: user, Offset: off}
}

// An abandon releases a waiting place like a leave (ABANDONED, counted in
// the stats), is a replay-safe no-op the second time, never touches an
// admission, and the user's next register goes to the back.
func TestAbandonReleasesOnlyAWaitingPlace(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	setupItem(t, l, "a", 1, 0, 60, 5)                     // t00000..t00004 for u0..u4, offsets 0..4
	_, err := tick(t, l, "a", 1, time.Now(), time.Second) // t00000 admitted
	require.NoError(t, err)

	res, err := l.Apply(ctx, []queue.Op{
		abandon("a", "t00002", "u2", 10),
		abandon("a", "t00002", "u2", 10), // the same record again
		abandon("a", "t00002", "u2", 11), // a second sweep of the same place
		abandon("a", "t00000", "u0", 12), // admitted meanwhile: keeps it
		abandon("a", "t00003", "u9", 13), // not that user's place
		abandon("a", "nobody", "u4", 14), // not that user's token
	})
	require.NoError(t, err)
	assert.Equal(t, []queue.Outcome{queue.Released, queue.Replay, queue.NotInLine, queue.NotInLine, queue.NotInLine, queue.NotInLine},
		[]queue.Outcome{res[0].Outcome, res[1].Outcome, res[2].Outcome, res[3].Outcome, res[4].Outcome, res[5].Outcome})
	assert.Equal(t, "t00002", res[0].TokenID)
	ids, err := l.Waiting(ctx, "a", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"t00001", "t00003", "t00004"}, ids)
	n, err := l.AbandonedCount(ctx, "a")
	require.NoError(t, err)
	assert.EqualValues(t, 1, n)

	st, err := l.Status(ctx, "a", "u2", "", 0, 2)
	require.NoError(t, err)
	assert.Equal(t, line.Status{State: line.Abandoned, TokenID: "t00002"}, st)
	st, err = l.Status(ctx, "a", "u0", "", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, line.Admitted, st.State, "an abandon never ends an admission")

	// u2 comes back: a new place at the back; a leave of the old one is no-op.
	res, err = l.Apply(ctx, []queue.Op{reg("a", "t2-again", "u2", 20), {Kind: queue.OpLeave, ItemID: "a", TokenID: "t00002", UserID: "u9", Offset: 21}})
	require.NoError(t, err)
	assert.Equal(t, queue.Result{Outcome: queue.Added, Seq: 6, TokenID: "t2-again"}, res[0])
	ids, err = l.Waiting(ctx, "a", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"t00001", "t00003", "t00004", "t2-again"}, ids)
}

// A refused abandon (a corrupt stats counter, a key of the wrong type)
// writes nothing.
func TestAbandonWritesNothingWhenRefused(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	setupItem(t, l, "r", 1, 0, 60, 3)
	k := queue.KeysFor("r")
	dump := func() map[string]string {
		return dumpKeys(t, rdb, k.Applied, k.Users, k.Waiting, k.Pool, k.Late, k.Stats)
	}
	require.NoError(t, rdb.HSet(ctx, k.Stats, "abandoned", "x").Err())
	before := dump()
	res, err := l.Apply(ctx, []queue.Op{abandon("r", "t00001", "u1", 10)})
	require.NoError(t, err)
	require.ErrorContains(t, res[0].Err, "corrupt")
	assert.Equal(t, before, dump())

	require.NoError(t, rdb.Del(ctx, k.Stats).Err())
	require.NoError(t, rdb.Set(ctx, k.Late, "corrupt", 0).Err())
	before = dump()
	res, err = l.Apply(ctx, []queue.Op{abandon("r", "t00001", "u1", 10)})
	require.NoError(t, err)
	require.ErrorContains(t, res[0].Err, "WRONGTYPE")
	assert.Equal(t, before, dump())
}

// Idle splits the places behind the cutoff into those still waiting (to
// release) and those gone (to forget), oldest first and bounded; MarkSeen
// never ages a place and NX never moves one.
func TestIdleAndSeen(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	setupItem(t, l, "s", 1, 0, 60, 1500)
	_, err := tick(t, l, "s", 1, time.Now(), time.Second) // t00000 admitted
	require.NoError(t, err)
	var seen []queue.SeenAt
	for i := range 1500 {
		seen = append(seen, queue.SeenAt{Item: "s", Member: queue.SeenMember(fmt.Sprintf("t%05d", i), fmt.Sprintf("u%d", i)), AtMs: int64(1000 + i)})
	}
	require.NoError(t, l.MarkSeen(ctx, seen, true))
	// A sign of life of t00001 at 5000; an older one (a late flush) and a
	// new place's NX do not move it back.
	m1 := queue.SeenMember("t00001", "u1")
	require.NoError(t, l.MarkSeen(ctx, []queue.SeenAt{{Item: "s", Member: m1, AtMs: 5000}}, false))
	require.NoError(t, l.MarkSeen(ctx, []queue.SeenAt{{Item: "s", Member: m1, AtMs: 4000}}, false))
	require.NoError(t, l.MarkSeen(ctx, []queue.SeenAt{{Item: "s", Member: m1, AtMs: 1}}, true))
	sc, err := rdb.ZScore(ctx, queue.KeysFor("s").Seen, m1).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 5000, sc)

	idle, gone, err := l.Idle(ctx, "s", 1004, 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"t00000 u0"}, gone, "admitted: only to forget")
	assert.Equal(t, []string{"t00002 u2", "t00003 u3", "t00004 u4"}, idle, "t00001 was seen since")

	idle, gone, err = l.Idle(ctx, "s", 1_000_000, 0)
	require.NoError(t, err)
	assert.Len(t, append(idle, gone...), queue.IdleLimit, "one step is bounded")
	require.NoError(t, l.Forget(ctx, "s", append(idle, gone...)))
	idle, gone, err = l.Idle(ctx, "s", 1_000_000, 0)
	require.NoError(t, err)
	assert.Len(t, idle, 1500-queue.IdleLimit)
	assert.Empty(t, gone)
	tok, user, ok := queue.ParseSeen(idle[len(idle)-1])
	assert.True(t, ok)
	assert.Equal(t, "t00001", tok)
	assert.Equal(t, "u1", user)
}
