package queue_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// The fairness parts meet: a user pooled for a draw or queued late behind it
// who then uses a bypass code keeps that place (a duplicate, no use
// counted); a user with no place is placed express at once, past the pending
// draw; an abandon releases a pooled or late place like a waiting one.
func TestBypassAndAbandonSeePooledAndLatePlaces(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	const item, window = "mix", int64(1_000_000)
	k := queue.KeysFor(item)
	res, err := l.Apply(ctx, []queue.Op{
		pooled(item, "p1", "u-pooled", 0, window),
		reg(item, "l1", "u-late", 1), // no window while the pool holds people: late
		pooled(item, "p2", "u-away", 2, window),
		regBypass(item, "b1", "u-pooled", 3, "code", 5),
		regBypass(item, "b2", "u-late", 4, "code", 5),
		regBypass(item, "b3", "u-staff", 5, "code", 5),
		{Kind: queue.OpAbandon, ItemID: item, TokenID: "p2", UserID: "u-away", Offset: 6},
	})
	require.NoError(t, err)
	got := make([]queue.Outcome, len(res))
	for i, r := range res {
		require.NoError(t, r.Err)
		got[i] = r.Outcome
	}
	require.Equal(t, []queue.Outcome{queue.PooledOne, queue.LateOne, queue.PooledOne,
		queue.Duplicate, queue.Duplicate, queue.Added, queue.Released}, got)

	uses, err := l.BypassUses(ctx, item, "code")
	require.NoError(t, err)
	require.Equal(t, int64(1), uses, "only the user without a place used the code")
	ex, err := l.Express(ctx, item, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"b3"}, ex)
	users, err := rdb.HGetAll(ctx, k.Users).Result()
	require.NoError(t, err)
	require.Equal(t, map[string]string{"u-pooled": "p1", "u-late": "l1", "u-staff": "b3", "u-away": "!Ap2"}, users)
	pool, err := rdb.ZRange(ctx, k.Pool, 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"p1"}, pool, "the abandoned place left the pool")

	st, err := l.Status(ctx, item, "u-pooled", "", 0, 0)
	require.NoError(t, err)
	require.Equal(t, line.Pooled, st.State)
	st, err = l.Status(ctx, item, "u-away", "", 0, 2)
	require.NoError(t, err)
	require.Equal(t, line.Abandoned, st.State)
	st, err = l.Status(ctx, item, "u-staff", "", 0, 5)
	require.NoError(t, err)
	require.Equal(t, line.Waiting, st.State)
	require.Equal(t, int64(1), st.Position)
}
