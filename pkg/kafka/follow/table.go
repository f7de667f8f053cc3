package follow

import (
	"context"
	"maps"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
)

// Table is a compacted topic held in memory: the latest value of every key,
// a tombstone (nil value) deleting it. Reads are lock-free; each fetch
// swaps in a new map. The item cache and the block list are Tables.
type Table[V any] struct {
	r       *Reader
	log     *zap.Logger
	o       TableOptions[V]
	rows    atomic.Pointer[map[string]V]
	skipped atomic.Int64
}

// TableOptions say how a Table reads its records.
type TableOptions[V any] struct {
	// Decode turns the value of a record keyed key into a row, or refuses it
	// (the record is skipped, counted and logged).
	Decode func(key string, value []byte) (V, error)
	// Keep, when set, says whether next replaces old (an older version
	// arriving late does not); nil: the later record always wins.
	Keep func(old, next V) bool
	// Swapped, when set, is called with every new map before the fetch counts
	// as read (Sync), so what a caller derives from it is in place too.
	Swapped func(rows map[string]V)
	// Skip is the log line of a skipped record.
	Skip string
}

// NewTable returns a Table of topic read from its start with a client built
// from base. No consumer group: every replica reads the whole topic.
func NewTable[V any](base []kgo.Opt, topic string, log *zap.Logger, o TableOptions[V]) (*Table[V], error) {
	r, err := New(base, topic, log)
	if err != nil {
		return nil, err
	}
	t := &Table[V]{r: r, log: log, o: o}
	empty := map[string]V{}
	t.rows.Store(&empty)
	if o.Swapped != nil {
		o.Swapped(empty)
	}
	return t, nil
}

// Get returns the row of key; ok is false for an unknown (or deleted) key.
func (t *Table[V]) Get(key string) (V, bool) {
	v, ok := (*t.rows.Load())[key]
	return v, ok
}

// All returns the table now; the caller must not change it.
func (t *Table[V]) All() map[string]V { return *t.rows.Load() }

// Skipped counts records Decode refused.
func (t *Table[V]) Skipped() int64 { return t.skipped.Load() }

// Run reads the topic until ctx ends, then closes the client.
func (t *Table[V]) Run(ctx context.Context) error { return t.r.Run(ctx, t.apply) }

// Sync waits until the table holds everything the topic held when Sync was
// called.
func (t *Table[V]) Sync(ctx context.Context) error { return t.r.Sync(ctx) }

func (t *Table[V]) apply(fs kgo.Fetches) {
	next := maps.Clone(*t.rows.Load())
	fs.EachRecord(func(r *kgo.Record) {
		key := string(r.Key)
		if r.Value == nil { // tombstone
			delete(next, key)
			return
		}
		v, err := t.o.Decode(key, r.Value)
		if err != nil {
			t.skipped.Add(1)
			t.log.Warn(t.o.Skip, zap.String("key", key), zap.Int32("partition", r.Partition), zap.Int64("offset", r.Offset), zap.Error(err))
			return
		}
		if old, ok := next[key]; ok && t.o.Keep != nil && !t.o.Keep(old, v) {
			return
		}
		next[key] = v
	})
	t.rows.Store(&next)
	if t.o.Swapped != nil {
		t.o.Swapped(next)
	}
}
