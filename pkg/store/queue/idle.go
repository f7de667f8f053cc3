package queue

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Signs of life (issue 16, abandoned places): an item with an idleTimeout
// keeps, in its Seen ZSET, "tokenId placeKey" scored by the last time (unix
// ms) the holder polled or held a stream; the scheduler's sweep releases the
// places whose score fell behind the timeout. Seen is derived state: a
// rebuild writes every waiting place with the rebuild's time (a grace).

//go:embed idle.lua
var idleSrc string

var idleScript = redis.NewScript(withPrelude(idleSrc))

// IdleLimit bounds the places one Idle call returns (one sweep step of an item).
const IdleLimit = 1000

// SeenMember is the Seen member of a place: its tokenId and its place key
// (topics.PlaceKey).
func SeenMember(tokenID, key string) string { return tokenID + " " + key }

// ParseSeen splits a Seen member into its tokenId and place key.
func ParseSeen(m string) (tokenID, key string, ok bool) {
	return strings.Cut(m, " ")
}

// Idle returns item's places whose last sign of life is at or before cutoff
// (unix ms), at most limit (<= IdleLimit) of them, oldest first: idle ones
// still wait (in the line, the pool or behind a draw), gone ones do not any
// more and only need forgetting. One read-only script.
func (l *Line) Idle(ctx context.Context, item string, cutoff int64, limit int) (idle, gone []string, err error) {
	if limit <= 0 || limit > IdleLimit {
		limit = IdleLimit
	}
	k := KeysFor(item)
	v, err := idleScript.Run(ctx, l.rdb, []string{k.Seen, k.Waiting, k.Pool, k.Late},
		strconv.FormatInt(cutoff, 10), strconv.Itoa(limit)).Slice()
	if err != nil {
		return nil, nil, fmt.Errorf("idle places of %s: %w", item, err)
	}
	if len(v) != 2 {
		return nil, nil, fmt.Errorf("idle places of %s: script returned %d values", item, len(v))
	}
	strs := func(x any) []string {
		a, _ := x.([]any)
		out := make([]string, 0, len(a))
		for _, s := range a {
			if s, ok := s.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return strs(v[0]), strs(v[1]), nil
}

// Forget removes members from item's Seen set (released or gone places).
func (l *Line) Forget(ctx context.Context, item string, members []string) error {
	for lo := 0; lo < len(members); lo += IdleLimit {
		part := members[lo:min(lo+IdleLimit, len(members))]
		a := make([]any, len(part))
		for i, m := range part {
			a[i] = m
		}
		if err := l.rdb.ZRem(ctx, KeysFor(item).Seen, a...).Err(); err != nil {
			return fmt.Errorf("forget %d seen places of %s: %w", len(part), item, err)
		}
	}
	return nil
}

// SeenAt is a sign of life of one place.
type SeenAt struct {
	Item, Member string
	AtMs         int64
}

// MarkSeen records signs of life in one pipeline, ZADD per item of at most
// IdleLimit members: with nx (a new place) only members not there yet are
// added; else a score only ever moves forward (ZADD GT), so a late flush
// never ages a place.
func (l *Line) MarkSeen(ctx context.Context, seen []SeenAt, nx bool) error {
	if len(seen) == 0 {
		return nil
	}
	by := map[string][]redis.Z{}
	var order []string
	for _, s := range seen {
		if _, ok := by[s.Item]; !ok {
			order = append(order, s.Item)
		}
		by[s.Item] = append(by[s.Item], redis.Z{Score: float64(s.AtMs), Member: s.Member})
	}
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, item := range order {
			zs := by[item]
			key := KeysFor(item).Seen
			for lo := 0; lo < len(zs); lo += IdleLimit {
				part := zs[lo:min(lo+IdleLimit, len(zs))]
				if nx {
					p.ZAddNX(ctx, key, part...)
				} else {
					p.ZAddGT(ctx, key, part...)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mark %d places seen: %w", len(seen), err)
	}
	return nil
}

// AbandonedCount reads how many of item's places were released idle (the Stats
// hash's abandoned counter; the record gives it too).
func (l *Line) AbandonedCount(ctx context.Context, item string) (int64, error) {
	n, err := l.rdb.HGet(ctx, KeysFor(item).Stats, "abandoned").Int64()
	if err == redis.Nil {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("abandoned of %s: %w", item, err)
	}
	return n, nil
}
