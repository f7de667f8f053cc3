package ingest

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
)

// owned tracks the waitroom.registrations partitions this replica is assigned
// in its group, so each item's line is snapshotted by the consumer that
// applies it (any replica's snapshot would be right: the split only shares
// the work).
type owned struct {
	mu    sync.Mutex
	parts map[int32]bool
	n     int // partitions of the topic (0: not read yet)
}

// opts are the group callbacks that keep o current; gone (may be nil) is
// told the partitions revoked or lost too.
func (o *owned) opts(gone func(map[string][]int32)) []kgo.Opt {
	set := func(on bool) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			o.mu.Lock()
			defer o.mu.Unlock()
			for _, p := range m[topics.Registrations] {
				if on {
					o.parts[p] = true
				} else {
					delete(o.parts, p)
				}
			}
			if !on && gone != nil {
				gone(m)
			}
		}
	}
	return []kgo.Opt{kgo.OnPartitionsAssigned(set(true)), kgo.OnPartitionsRevoked(set(false)), kgo.OnPartitionsLost(set(false))}
}

// items are the items of all whose records go to a partition o holds, by
// the producers' partitioner (kgo's default: murmur2 of the key, as Kafka's
// Java client). adm reads the topic's partition count once.
func (o *owned) items(ctx context.Context, adm *kadm.Client, all []string) []string {
	o.mu.Lock()
	n, parts := o.n, maps.Clone(o.parts)
	o.mu.Unlock()
	if n == 0 {
		ends, err := adm.ListEndOffsets(ctx, topics.Registrations)
		if err != nil || ends.Error() != nil {
			return nil
		}
		ends.Each(func(kadm.ListedOffset) { n++ })
		o.mu.Lock()
		o.n = n
		o.mu.Unlock()
	}
	part := kgo.StickyKeyPartitioner(nil).ForTopic(topics.Registrations)
	var out []string
	for _, it := range all {
		if parts[int32(part.Partition(&kgo.Record{Key: []byte(it)}, n))] {
			out = append(out, it)
		}
	}
	slices.Sort(out)
	return out
}
