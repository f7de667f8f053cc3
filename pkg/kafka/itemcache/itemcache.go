// Package itemcache keeps every item's state in memory, fed by the compacted
// waitroom.items topic, so the register hot path can check an item without a
// Redis round trip. Reads are lock-free; updates swap a new map.
package itemcache

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kafka/follow"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Cache is the in-memory view of waitroom.items.
type Cache struct {
	t *follow.Table[topics.ItemState]
}

// New returns a Cache reading waitroom.items from the start with a client
// built from base (seed brokers, logger...). No consumer group: every replica
// reads the whole compacted topic.
func New(base []kgo.Opt, log *zap.Logger) (*Cache, error) {
	t, err := follow.NewTable(base, topics.Items, log, follow.TableOptions[topics.ItemState]{
		Decode: decode,
		Keep:   func(old, next topics.ItemState) bool { return next.Version > old.Version },
		Skip:   "item cache skips a record",
	})
	if err != nil {
		return nil, fmt.Errorf("item cache: %w", err)
	}
	return &Cache{t: t}, nil
}

func decode(id string, v []byte) (topics.ItemState, error) {
	s, err := topics.DecodeItem(v)
	if err == nil && s.ItemID != id {
		err = fmt.Errorf("key %q differs from itemId %q", id, s.ItemID)
	}
	return s, err
}

// Get returns the state of item; ok is false for an unknown (or deleted) item.
func (c *Cache) Get(item string) (topics.ItemState, bool) { return c.t.Get(item) }

// All returns a snapshot of every item.
func (c *Cache) All() map[string]topics.ItemState { return c.t.All() }

// Skipped counts records that could not be decoded (the consumer service
// dead-letters them; the cache only skips them).
func (c *Cache) Skipped() int64 { return c.t.Skipped() }

// Run reads the topic until ctx ends, then closes the client.
func (c *Cache) Run(ctx context.Context) error { return c.t.Run(ctx) }

// Sync waits until the cache has read everything the topic held when Sync was
// called: after it returns, every item published before is visible.
func (c *Cache) Sync(ctx context.Context) error {
	if err := c.t.Sync(ctx); err != nil {
		return fmt.Errorf("item cache: %w", err)
	}
	return nil
}
