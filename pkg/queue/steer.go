package queue

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/topics"
)

// Steering is an item's effective target as promote reads it.
type Steering struct {
	Rate float64   // admit at most this fast (and no faster than the policy's rate)
	Cap  int64     // hold at most this many admitted (and no more than maxActive)
	At   time.Time // when the controller decided it
}

// Steer stores the steering controller's decision d for item under the
// leader's epoch, so promote admits within it; a decision that does not
// apply (advice, or the static policy on a lost signal) clears it. epoch 0
// (a rebuild) is not fenced. ErrFenced when a newer leader took the item.
func (l *Line) Steer(ctx context.Context, item string, epoch int64, d *topics.SteerDecision, at time.Time) error {
	k := KeysFor(item)
	rate, capacity := "", ""
	if d.Applies() {
		rate, capacity = strconv.FormatFloat(d.Rate, 'f', -1, 64), strconv.FormatInt(d.Cap, 10)
	}
	n, err := steerScript.Run(ctx, l.rdb, []string{k.Pace, k.Epoch}, epoch, rate, capacity, at.UnixMilli()).Int()
	if err != nil {
		return fmt.Errorf("steer %s: %w", item, err)
	}
	if n == 0 {
		return ErrFenced
	}
	return nil
}

// Steering reads item's effective target; ok is false when none applies.
func (l *Line) Steering(ctx context.Context, item string) (s Steering, ok bool, err error) {
	v, err := l.rdb.HMGet(ctx, KeysFor(item).Pace, "steerRate", "steerCap", "steerAt").Result()
	if err != nil && err != redis.Nil {
		return s, false, fmt.Errorf("read steering of %s: %w", item, err)
	}
	if len(v) < 3 || v[0] == nil {
		return s, false, nil
	}
	rate, rerr := strconv.ParseFloat(fmt.Sprint(v[0]), 64)
	capacity, cerr := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
	at, aerr := strconv.ParseInt(fmt.Sprint(v[2]), 10, 64)
	if rerr != nil || cerr != nil || aerr != nil {
		return s, false, fmt.Errorf("read steering of %s: corrupt %v", item, v)
	}
	return Steering{Rate: rate, Cap: capacity, At: time.UnixMilli(at)}, true, nil
}
