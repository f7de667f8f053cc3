package queue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// Promote admits within the smaller of the item's policy and the
// controller's effective target; advice and the static fallback apply
// nothing; a fenced leader cannot steer.
func TestPromoteAdmitsWithinTheSmallerOfPolicyAndSteering(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	setupItem(t, l, "s", 10, 25, 60, 100)
	t0 := time.UnixMilli(1_000_000_000_000)

	// Four allowed (head 0 → limit 4) under maxActive 25; rate 20 above the policy's 10 (the policy wins).
	d := &topics.SteerDecision{Target: 4, Allow: 4, HeadLimit: 4, Rate: 20}
	require.NoError(t, l.Steer(ctx, "s", 1, d, t0))
	st, ok, err := l.Steering(ctx, "s")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, queue.Steering{Applies: true, Rate: 20, HeadLimit: 4, At: t0, Last: d}, st)
	tk, err := tick(t, l, "s", 1, t0, time.Second)
	require.NoError(t, err)
	assert.Equal(t, []string{"t00000", "t00001", "t00002", "t00003"}, tk.Unpublished, "the allowance holds, in line order")
	// Expired admissions free no room: the allowance is spent.
	tk, err = tick(t, l, "s", 1, t0.Add(2*time.Minute), time.Second)
	require.NoError(t, err)
	assert.Equal(t, int64(4), tk.Expired)
	assert.Zero(t, tk.Admitted, "expiries do not refill an allowance")

	// Rate 2 under the policy's 10: a second later, the budget holds 2 of the 6 allowed.
	require.NoError(t, l.Steer(ctx, "s", 1, &topics.SteerDecision{Target: 10, Allow: 6, HeadLimit: 10, Rate: 2}, t0))
	tk, err = tick(t, l, "s", 1, t0.Add(2*time.Minute+time.Second), time.Second)
	require.NoError(t, err)
	assert.Equal(t, 2, tk.Admitted, "the bucket holds one second of the effective rate")

	// Advice applies nothing: the policy's 10 a second and maxActive 25 run again.
	advice := &topics.SteerDecision{Target: 1, Allow: 1, HeadLimit: 7, Rate: 1, Advice: true, Reason: "shrink"}
	require.NoError(t, l.Steer(ctx, "s", 1, advice, t0))
	st, ok, err = l.Steering(ctx, "s")
	require.NoError(t, err)
	assert.Equal(t, queue.Steering{At: t0, Last: advice}, st, "the advice is kept for the console, not applied")
	assert.True(t, ok)
	tk, err = tick(t, l, "s", 1, t0.Add(2*time.Minute+4*time.Second), time.Second)
	require.NoError(t, err)
	assert.Equal(t, 10, tk.Admitted)

	// A newer leader promoted: the old one cannot steer.
	_, err = tick(t, l, "s", 5, t0.Add(2*time.Minute+5*time.Second), time.Second)
	require.NoError(t, err)
	err = l.Steer(ctx, "s", 4, d, t0.Add(time.Minute))
	require.ErrorIs(t, err, queue.ErrFenced)
	st, _, err = l.Steering(ctx, "s")
	require.NoError(t, err)
	assert.Equal(t, queue.Steering{At: t0, Last: advice}, st, "the fenced write left nothing")
}

// The steering policy and its rate bounds survive the state hash.
func TestItemKeepsTheSteeringPolicy(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	s := topics.ItemState{V: topics.Version, ItemID: "k", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 5, SessionTTLSeconds: 60, MinRate: 0.5, MaxRate: 20,
			Steer: &topics.SteerPolicy{TargetP95Ms: 300, OnSignalLost: topics.SteerStatic, Mode: topics.SteerAdvise}}}
	_, err := l.ApplyItem(ctx, s)
	require.NoError(t, err)
	got, ok, err := l.Item(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, s.Policy, got.Policy)
}

// A steered item never admits above maxRate, before its controller's first
// decision as after one that gives it back to the static policy.
func TestASteeredItemStaysUnderMaxRate(t *testing.T) {
	ctx := context.Background()
	l := queue.New(testenv.Redis(t))
	_, err := l.ApplyItem(ctx, topics.ItemState{ItemID: "m", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 50, SessionTTLSeconds: 60, MaxRate: 3, Steer: &topics.SteerPolicy{TargetP95Ms: 300}}})
	require.NoError(t, err)
	var ops []queue.Op
	for i := range 100 {
		ops = append(ops, reg("m", fmt.Sprintf("t%05d", i), fmt.Sprintf("u%d", i), int64(i)))
	}
	_, err = l.Apply(ctx, ops)
	require.NoError(t, err)
	t0 := time.UnixMilli(1_000_000_000_000)
	tk, err := tick(t, l, "m", 1, t0, time.Second)
	require.NoError(t, err)
	assert.Equal(t, 3, tk.Admitted, "one second of maxRate, not of the policy's 50/s")
	// The static policy (no signal yet): the policy's rate and room, under maxRate still.
	require.NoError(t, l.Steer(ctx, "m", 1, &topics.SteerDecision{Target: 1, Allow: 1, HeadLimit: 4, Rate: 1, Static: true}, t0))
	tk, err = tick(t, l, "m", 1, t0.Add(time.Second), time.Second)
	require.NoError(t, err)
	assert.Equal(t, 3, tk.Admitted, "the allowance of 1 does not apply, maxRate does")
}
