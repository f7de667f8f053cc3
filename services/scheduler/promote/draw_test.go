package promote

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// readDraws reads the draw records of waitroom.registrations.
func (w *world) readDraws(want int) []topics.RegistrationEvent {
	w.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...), kgo.ConsumeTopics(topics.Registrations),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(w.t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []topics.RegistrationEvent
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		require.NoError(w.t, ctx.Err(), "got %d draws of %d", len(out), want)
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := topics.DecodeRegistration(r.Value)
			require.NoError(w.t, err)
			require.Equal(w.t, ev.ItemID, string(r.Key))
			out = append(out, ev)
		})
	}
	return out
}

// A due pool gets one draw record with the chain's next round, its seed
// revealed; a tick before the consumer applied it publishes nothing more;
// once the first draw is applied the next window is round 2. A replica
// without the key publishes nothing and counts the error.
func TestDueDrawsArePublishedWithTheNextRound(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	key := []byte("scheduler-test-draw-key-0123456789")
	root := draw.Root(key, "sale", "s1")
	it := topics.ItemState{V: 1, ItemID: "sale", Name: "sale", Stock: -1, Enabled: true, Version: 1, Mode: topics.ModeRandom,
		DrawCommit: draw.Commit(root, 10), DrawRounds: 10, DrawSalt: "s1"}
	_, err := w.line.ApplyItem(ctx, it)
	require.NoError(t, err)
	_, err = w.line.Apply(ctx, []queue.Op{
		{Kind: queue.OpRegister, ItemID: "sale", TokenID: "a", UserID: "ua", Offset: 0, Window: 1000},
		{Kind: queue.OpRegister, ItemID: "sale", TokenID: "b", UserID: "ub", Offset: 1, Window: 2000},
	})
	require.NoError(t, err)

	keyless := w.replica(Options{})
	keyless.drawDue(ctx, []string{"sale"}, time.UnixMilli(1500))
	require.Equal(t, 1.0, testutil.ToFloat64(keyless.m.drawErrors))

	s := w.replica(Options{DrawKey: key})
	s.drawDue(ctx, []string{"sale"}, time.UnixMilli(999))  // not closed yet
	s.drawDue(ctx, []string{"sale"}, time.UnixMilli(1500)) // window 1000
	s.drawDue(ctx, []string{"sale"}, time.UnixMilli(1600)) // the same, not applied yet: not again
	d := w.readDraws(1)[0]
	require.Equal(t, topics.KindDraw, d.Kind)
	require.Equal(t, topics.Draw{Window: 1000, Round: 1, Seed: d.Draw.Seed, Commit: it.DrawCommit}, *d.Draw)
	require.NoError(t, draw.Verify(d.Draw.Seed, 1, it.DrawCommit))
	require.Equal(t, 1.0, testutil.ToFloat64(s.m.draws))

	_, err = w.line.Draw(ctx, queue.DrawOp{ItemID: "sale", Offset: 2, Window: 1000, Round: 1, Seed: d.Draw.Seed, Commit: it.DrawCommit})
	require.NoError(t, err)
	s.drawDue(ctx, []string{"sale"}, time.UnixMilli(2500))
	ds := w.readDraws(2)
	require.Equal(t, int64(2000), ds[1].Draw.Window)
	require.Equal(t, int64(2), ds[1].Draw.Round)
	require.NoError(t, draw.Verify(ds[1].Draw.Seed, 2, it.DrawCommit))
}
