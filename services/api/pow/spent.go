package pow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Spent remembers used challenges so each solves one registration. The
// memory is ephemeral, like the throttle buckets: a key per used challenge
// (SET NX) that expires with the challenge, so it holds only challenges that
// could still be replayed and is not part of the record (a Redis that lost it
// lets a still-valid challenge be used once more, nothing else).
type Spent struct {
	rdb redis.Cmdable
	now func() time.Time
}

// NewSpent returns a Spent over rdb.
func NewSpent(rdb redis.Cmdable) *Spent { return &Spent{rdb: rdb, now: time.Now} }

// Use marks c used; first is false when it was used before.
func (s *Spent) Use(ctx context.Context, c Challenge) (first bool, err error) {
	// The signature is unique per challenge (it covers the random nonce).
	first, err = s.Mark(ctx, "wr:pow:"+c.Raw[strings.LastIndexByte(c.Raw, '.')+1:], c.ExpiresAt)
	if err != nil {
		return false, fmt.Errorf("mark proof-of-work challenge used: %w", err)
	}
	return first, nil
}

// Mark marks the single-use thing named key (a user assertion's jti too)
// used until expiresAt; first is false when it was used before.
func (s *Spent) Mark(ctx context.Context, key string, expiresAt time.Time) (first bool, err error) {
	return s.MarkFor(ctx, key, "", expiresAt)
}

// MarkFor is Mark for a use named owner (a user assertion's: the place its
// registration names): a use by the owner that used key first is that use
// again (a retry whose answer was lost), so first is true for it too. An
// empty owner names no use: every use after the first is refused.
func (s *Spent) MarkFor(ctx context.Context, key, owner string, expiresAt time.Time) (first bool, err error) {
	ttl := expiresAt.Sub(s.now())
	if ttl < time.Millisecond {
		ttl = time.Millisecond
	}
	ok, err := s.rdb.SetNX(ctx, key, "1:"+owner, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("mark %s used: %w", key, err)
	}
	if ok || owner == "" {
		return ok, nil
	}
	// The value never changes once set: the first use's owner.
	was, err := s.rdb.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil): // expired since: so is what it marked
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read who used %s: %w", key, err)
	}
	return was == "1:"+owner, nil
}
