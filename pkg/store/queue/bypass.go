package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// BypassUses reads how many registrations bypass code id of item placed so
// far (enqueue.lua counts them; the record replays them).
func (l *Line) BypassUses(ctx context.Context, item, id string) (int64, error) {
	n, err := l.rdb.HGet(ctx, KeysFor(item).Bypass, id).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("uses of bypass code %s of %s: %w", id, item, err)
	}
	return n, nil
}

// BypassUsesAll reads the uses so far of every bypass code of item.
func (l *Line) BypassUsesAll(ctx context.Context, item string) (map[string]int64, error) {
	m, err := l.rdb.HGetAll(ctx, KeysFor(item).Bypass).Result()
	if err != nil {
		return nil, fmt.Errorf("bypass uses of %s: %w", item, err)
	}
	out := make(map[string]int64, len(m))
	for code, v := range m {
		out[code], _ = strconv.ParseInt(v, 10, 64)
	}
	return out, nil
}

// Express lists the tokenIds of item waiting on a bypass code (admitted at
// the next tick), in seq order; at most limit (<= 0: all).
func (l *Line) Express(ctx context.Context, item string, limit int64) ([]string, error) {
	stop := limit - 1
	if limit <= 0 {
		stop = -1
	}
	ids, err := l.rdb.ZRange(ctx, KeysFor(item).Express, 0, stop).Result()
	if err != nil {
		return nil, fmt.Errorf("express of %s: %w", item, err)
	}
	return ids, nil
}
