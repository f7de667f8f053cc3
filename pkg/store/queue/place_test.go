package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// PlaceMany answers for each token what Place answers for it: waiting places
// (an express one at position 1), admitted, pooled and late ones of a
// pre-queue, places that ended, and tokens never seen.
func TestPlaceManyIsPlaceForEach(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "pm", 10, 25, 60, 40)
	t0 := time.Now().Add(-10 * time.Second).Truncate(time.Millisecond)
	_, err := tick(t, l, "pm", 1, t0, time.Second) // t00000..t00009 admitted
	require.NoError(t, err)
	_, err = l.Apply(ctx, []queue.Op{
		{Kind: queue.OpLeave, ItemID: "pm", TokenID: "t00020", UserID: "u20", Offset: 40},
		abandon("pm", "t00021", "u21", 41),
		regBypass("pm", "s1", "staff-1", 42, "c1", 1),
	})
	require.NoError(t, err)
	// A pre-queue in another item: pooled and late places.
	_, err = l.Apply(ctx, []queue.Op{pooled("pq", "p1", "up1", 0, 1_000_000), reg("pq", "late1", "ul1", 1)})
	require.NoError(t, err)

	cases := map[string][]string{
		"pm": {"t00015", "t00001", "t00039", "t00020", "t00021", "s1", "nobody", "t00009", "t00010", "t00015"},
		"pq": {"p1", "late1", "nobody"},
	}
	waitingSeen := 0
	for item, toks := range cases {
		places, waiting, err := l.PlaceMany(ctx, item, toks)
		require.NoError(t, err)
		require.Len(t, places, len(toks))
		require.Len(t, waiting, len(toks))
		for i, tok := range toks {
			p, w, err := l.Place(ctx, item, tok)
			require.NoError(t, err)
			assert.Equal(t, w, waiting[i], "%s %s waiting", item, tok)
			assert.Equal(t, p, places[i], "%s %s", item, tok)
			if w {
				waitingSeen++
			}
		}
	}
	// The comparison means something only if the cases are what they say.
	assert.Equal(t, 5, waitingSeen, "t00015 twice, t00039, s1, t00010")
	p, _, err := l.Place(ctx, "pm", "s1")
	require.NoError(t, err)
	assert.Equal(t, line.Place{Seq: p.Seq, Head: 10, Position: 1, Total: p.Total, AdmittedLastMinute: 10,
		PacedSinceMs: t0.UnixMilli(), Active: 10}, p)
	places, waiting, err := l.PlaceMany(ctx, "pm", nil)
	require.NoError(t, err)
	assert.Empty(t, places)
	assert.Empty(t, waiting)
}
