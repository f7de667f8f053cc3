package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Counters are an item's counts beyond Stats, for the operator's console.
type Counters struct {
	// Counts are the fields of the item's stats hash (abandoned: places
	// released idle; others as their writers add them). Absent: never counted.
	Counts map[string]int64
	// PacedSinceMs is when the oldest admission of the last minute was (0: none).
	PacedSinceMs int64
}

// Counters reads an item's stats hash and the time of its oldest paced
// admission in one round trip.
func (l *Line) Counters(ctx context.Context, item string) (Counters, error) {
	k := KeysFor(item)
	var all *redis.MapStringStringCmd
	var oldest *redis.StringCmd
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, k.Stats)
		oldest = p.LIndex(ctx, k.Paced, 0)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Counters{}, fmt.Errorf("counters of %s: %w", item, err)
	}
	c := Counters{Counts: make(map[string]int64, len(all.Val())), PacedSinceMs: pacedMs(oldest.Val())}
	for f, v := range all.Val() {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			c.Counts[f] = n
		}
	}
	return c, nil
}
