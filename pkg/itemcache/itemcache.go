// Package itemcache keeps every item's state in memory, fed by the compacted
// waitroom.items topic, so the register hot path can check an item without a
// Redis round trip. Reads are lock-free; updates swap a new map.
package itemcache

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Cache is the in-memory view of waitroom.items.
type Cache struct {
	cl    *kgo.Client
	adm   *kadm.Client
	log   *zap.Logger
	items atomic.Pointer[map[string]topics.ItemState]

	mu       sync.Mutex
	next     map[int32]int64 // next offset to read, per partition
	progress chan struct{}   // closed and replaced after every applied fetch
	skipped  atomic.Int64
}

// New returns a Cache reading waitroom.items from the start with a client
// built from base (seed brokers, logger...). No consumer group: every replica
// reads the whole compacted topic.
func New(base []kgo.Opt, log *zap.Logger) (*Cache, error) {
	opts := append(append([]kgo.Opt{}, base...),
		kgo.ConsumeTopics(topics.Items),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("item cache kafka client: %w", err)
	}
	c := &Cache{cl: cl, adm: kadm.NewClient(cl), log: log, next: map[int32]int64{}, progress: make(chan struct{})}
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
func (c *Cache) Run(ctx context.Context) error {
	defer c.cl.Close()
	for {
		fs := c.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			c.log.Warn("item cache fetch", zap.String("topic", t), zap.Int32("partition", p), zap.Error(err))
		})
		c.apply(fs)
	}
}

func (c *Cache) apply(fs kgo.Fetches) {
	if fs.NumRecords() == 0 {
		return
	}
	cur := *c.items.Load()
	next := maps.Clone(cur)
	c.mu.Lock()
	fs.EachRecord(func(r *kgo.Record) {
		c.next[r.Partition] = r.Offset + 1
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
	close(c.progress)
	c.progress = make(chan struct{})
	c.mu.Unlock()
}

// Sync waits until the cache has read everything the topic held when Sync was
// called: after it returns, every item published before is visible.
func (c *Cache) Sync(ctx context.Context) error {
	ends, err := c.adm.ListEndOffsets(ctx, topics.Items)
	if err != nil {
		return fmt.Errorf("item cache: list end offsets: %w", err)
	}
	if err := ends.Error(); err != nil {
		return fmt.Errorf("item cache: list end offsets: %w", err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	for {
		c.mu.Lock()
		done := true
		for p, end := range want {
			if c.next[p] < end {
				done = false
				break
			}
		}
		wait := c.progress
		c.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("item cache: sync: %w", errors.Join(ctx.Err(), context.Cause(ctx)))
		}
	}
}
