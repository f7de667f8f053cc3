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
	// Refused counts the registrations the api refused, by error code
	// (REGISTRATION_REJECTED, BLOCKED, RATE_LIMITED, POW_INVALID...).
	Refused map[string]int64
	// PreQueued is how many wait for a draw (pooled or late).
	PreQueued int64
}

// Counters reads an item's stats hash and the time of its oldest paced
// admission in one round trip.
func (l *Line) Counters(ctx context.Context, item string) (Counters, error) {
	k := KeysFor(item)
	var all, refused *redis.MapStringStringCmd
	var oldest *redis.StringCmd
	var pool, late *redis.IntCmd
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, k.Stats)
		oldest = p.LIndex(ctx, k.Paced, 0)
		refused = p.HGetAll(ctx, k.Refused)
		pool, late = p.ZCard(ctx, k.Pool), p.ZCard(ctx, k.Late)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Counters{}, fmt.Errorf("counters of %s: %w", item, err)
	}
	c := Counters{Counts: counts(all.Val()), Refused: counts(refused.Val()), PacedSinceMs: pacedMs(oldest.Val()),
		PreQueued: pool.Val() + late.Val()}
	return c, nil
}

func counts(m map[string]string) map[string]int64 {
	out := make(map[string]int64, len(m))
	for f, v := range m {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[f] = n
		}
	}
	return out
}

// AddRefused adds the api's refusal counts (item -> error code -> n) in one
// pipeline.
func (l *Line) AddRefused(ctx context.Context, by map[string]map[string]int64) error {
	if len(by) == 0 {
		return nil
	}
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for item, codes := range by {
			k := KeysFor(item).Refused
			for code, n := range codes {
				p.HIncrBy(ctx, k, code, n)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("count refusals: %w", err)
	}
	return nil
}
