package promote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/services/scheduler/admin"
)

// ReplicaKey holds what replica id says about itself (its host and admin
// address), refreshed with each heartbeat and expiring with it: ephemeral
// like the locks, never part of the line's view.
func ReplicaKey(id string) string { return "wr:scheduler:replica:" + id }

// lockValue is the value this replica writes into a shard's lock: its id,
// then a random part (redsync extends and releases only its own value, so
// each acquisition still writes a value nobody else has). ShardLeaders reads
// the id back.
func (s *Scheduler) lockValue() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return s.id + "." + hex.EncodeToString(b[:]), nil
}

// describe records what this replica says about itself, expiring when it
// stops beating.
func (s *Scheduler) describe(ctx context.Context, p redis.Pipeliner) {
	if s.opt.Describe != "" {
		p.Set(ctx, ReplicaKey(s.id), s.opt.Describe, 2*s.opt.LockExpiry)
	}
}

// ShardLeaders reads which replica holds each shard's lock now, with what
// that replica said about itself: what the operator's console shows.
func (s *Scheduler) ShardLeaders(ctx context.Context) ([]admin.ShardLeader, error) {
	n := s.opt.Shards
	locks := make([]*redis.StringCmd, n)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			locks[i] = p.Get(ctx, ShardLock(i, n))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read shard locks: %w", err)
	}
	out := make([]admin.ShardLeader, n)
	ids := map[string]*redis.StringCmd{}
	for i, c := range locks {
		out[i].Shard = i
		if c.Err() != nil {
			continue // nobody leads it (redis.Nil)
		}
		id, _, ok := strings.Cut(c.Val(), ".")
		if !ok {
			id = "?" // a lock written before replicas named themselves in it
		}
		out[i].Replica, out[i].Self = id, id == s.id
		ids[id] = nil
	}
	if len(ids) > 0 {
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for id := range ids {
				ids[id] = p.Get(ctx, ReplicaKey(id))
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("read replicas: %w", err)
		}
		for i := range out {
			if c := ids[out[i].Replica]; c != nil && c.Err() == nil {
				out[i].Host = c.Val()
			}
		}
	}
	return out, nil
}
