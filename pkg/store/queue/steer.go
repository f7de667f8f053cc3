package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/topics"
)

// Steering is an item's steering as Redis holds it.
type Steering struct {
	// Applies: promote admits within Rate and Cap (the smaller of them and
	// the item's policy); false while the last decision is advice or the
	// static fallback.
	Applies bool
	Rate    float64
	// HeadLimit: nobody from the line is admitted past this seq.
	HeadLimit int64
	At        time.Time             // when the controller decided the last decision
	Last      *topics.SteerDecision // the last decision, applied or not
}

// Steer stores the steering controller's decision d for item under the
// leader's epoch: promote admits within it when it applies (d.Applies),
// and the console reads it either way. epoch 0 (a rebuild) is not fenced.
// ErrFenced when a newer leader took the item.
func (l *Line) Steer(ctx context.Context, item string, epoch int64, d *topics.SteerDecision, at time.Time) error {
	k := KeysFor(item)
	rate, capacity := "", ""
	if d.Applies() {
		rate, capacity = strconv.FormatFloat(d.Rate, 'f', -1, 64), strconv.FormatInt(d.HeadLimit, 10)
	}
	n, err := steerScript.Run(ctx, l.rdb, []string{k.Pace, k.Epoch}, epoch, rate, capacity, at.UnixMilli(), topics.Encode(d)).Int()
	if err != nil {
		return fmt.Errorf("steer %s: %w", item, err)
	}
	if n == 0 {
		return ErrFenced
	}
	return nil
}

// Steering reads item's steering; ok is false when it has none.
func (l *Line) Steering(ctx context.Context, item string) (s Steering, ok bool, err error) {
	v, err := l.rdb.HMGet(ctx, KeysFor(item).Pace, "steerRate", "steerHead", "steerAt", "steerLast").Result()
	if err != nil && err != redis.Nil {
		return s, false, fmt.Errorf("read steering of %s: %w", item, err)
	}
	if len(v) < 4 || v[3] == nil {
		return s, false, nil
	}
	s.Last = new(topics.SteerDecision)
	at, aerr := strconv.ParseInt(fmt.Sprint(v[2]), 10, 64)
	if jerr := json.Unmarshal([]byte(fmt.Sprint(v[3])), s.Last); jerr != nil || aerr != nil {
		return s, false, fmt.Errorf("read steering of %s: corrupt decision", item)
	}
	s.At = time.UnixMilli(at)
	if v[0] != nil {
		rate, rerr := strconv.ParseFloat(fmt.Sprint(v[0]), 64)
		capacity, cerr := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
		if rerr != nil || cerr != nil {
			return s, false, fmt.Errorf("read steering of %s: corrupt rate or head limit %v", item, v)
		}
		s.Applies, s.Rate, s.HeadLimit = true, rate, capacity
	}
	return s, true, nil
}
