// Package itemcache keeps every item's state in memory, fed by the compacted
// waitroom.items topic, so the register hot path can check an item without a
// Redis round trip. Reads are lock-free; updates swap a new map.
package itemcache

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/follow"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Cache is the in-memory view of waitroom.items.
type Cache struct {
	r       *follow.Reader
	log     *zap.Logger
	items   atomic.Pointer[map[string]topics.ItemState]
	skipped atomic.Int64
}

// New returns a Cache reading waitroom.items from the start with a client
// built from base (seed brokers, logger...). No consumer group: every replica
// reads the whole compacted topic.
func New(base []kgo.Opt, log *zap.Logger) (*Cache, error) {
	r, err := follow.New(base, topics.Items, log)
	if err != nil {
		return nil, fmt.Errorf("item cache: %w", err)
	}
	c := &Cache{r: r, log: log}
	empty := map[string]topics.ItemState{}
	c.items.Store(&empty)
	return c, nil
}

// Get returns the state of item; ok is false for an unknown (or deleted) item.
func (c *Cache) Get(item string) (topics.ItemState, bool) {
	s, ok := (*c.items.Load())[item]
	return s, ok
}

// All returns a snapshot of every item.
func (c *Cache) All() map[string]topics.ItemState { return *c.items.Load() }

// Skipped counts records that could not be decoded (the consumer service
// dead-letters them; the cache only skips them).
func (c *Cache) Skipped() int64 { return c.skipped.Load() }

// Run reads the topic until ctx ends, then closes the client.
func (c *Cache) Run(ctx context.Context) error { return c.r.Run(ctx, c.apply) }

func (c *Cache) apply(fs kgo.Fetches) {
	next := maps.Clone(*c.items.Load())
	fs.EachRecord(func(r *kgo.Record) {
		id := string(r.Key)
		if r.Value == nil { // tombstone: the item is gone
			delete(next, id)
			return
		}
		s, err := topics.DecodeItem(r.Value)
		if err != nil || s.ItemID != id {
			if err == nil {
				err = fmt.Errorf("key %q differs from itemId %q", id, s.ItemID)
			}
			c.skipped.Add(1)
			c.log.Warn("item cache skips a record", zap.Int32("partition", r.Partition), zap.Int64("offset", r.Offset), zap.Error(err))
			return
		}
		if old, ok := next[id]; ok && old.Version >= s.Version {
			return
		}
		next[id] = s
	})
	c.items.Store(&next)
}

// Sync waits until the cache has read everything the topic held when Sync was
// called: after it returns, every item published before is visible.
func (c *Cache) Sync(ctx context.Context) error {
	if err := c.r.Sync(ctx); err != nil {
		return fmt.Errorf("item cache: %w", err)
	}
	return nil
}
