package queue_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// A count HINCRBY cannot take (a number to tonumber, but no integer to
// Redis: "1.5", "2.0", "1e0", " 1") is corrupt as "x" is: the record that
// would add to it (a bypass register, an abandon) is refused before its
// first write and leaves nothing behind, not placed (or released) with its
// count left as it was.
func TestRefusedOnACountHINCRBYCannotTakeWritesNothing(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	for _, bad := range []string{"1.5", "2.0", "1e0", " 1"} {
		t.Run(bad, func(t *testing.T) {
			require.NoError(t, rdb.FlushDB(ctx).Err())
			setupItem(t, l, "c", 1, 0, 60, 3)
			k := queue.KeysFor("c")
			require.NoError(t, rdb.HSet(ctx, k.Bypass, "staff", bad).Err())
			require.NoError(t, rdb.HSet(ctx, k.Stats, "abandoned", bad).Err())
			dump := func() map[string]string {
				return dumpKeys(t, rdb, k.Applied, k.Users, k.Seq, k.Waiting, k.Express, k.Bypass, k.Pool, k.Late, k.Stats, k.Changes)
			}
			before := dump()
			res, err := l.Apply(ctx, []queue.Op{
				{Kind: queue.OpRegister, ItemID: "c", TokenID: "vip", UserID: "vip", Offset: 10, Bypass: &queue.BypassOp{Code: "staff", Count: 5}}})
			require.NoError(t, err)
			require.Error(t, res[0].Err, "a bypass use on a corrupt count is refused")
			assert.Equal(t, before, dump(), "the refused bypass register wrote nothing")

			res, err = l.Apply(ctx, []queue.Op{abandon("c", "t00001", "u1", 11)})
			require.NoError(t, err)
			require.Error(t, res[0].Err, "an abandon on a corrupt count is refused")
			assert.Equal(t, before, dump(), "the refused abandon wrote nothing")
		})
	}
}
