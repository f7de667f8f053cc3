package snapshot

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// Latest gathers waitroom.snapshots as a rebuild reads it (each partition in
// offset order) and picks each item's latest complete snapshot.
type Latest struct {
	heads  map[string]topics.SnapshotHead // item -> its last head
	chunks map[string][]byte              // chunk key -> value, until a tombstone
}

// NewLatest returns an empty Latest.
func NewLatest() *Latest {
	return &Latest{heads: map[string]topics.SnapshotHead{}, chunks: map[string][]byte{}}
}

// Add takes one record of waitroom.snapshots. A head with the item's key
// follows the item's earlier heads in its partition, so the last one read is
// the latest; a record that does not decode is passed over.
func (l *Latest) Add(rec *kgo.Record) {
	item, _, _, chunk := topics.ParseSnapshotKey(string(rec.Key))
	switch {
	case chunk && rec.Value == nil:
		delete(l.chunks, string(rec.Key))
	case chunk:
		l.chunks[string(rec.Key)] = rec.Value
	case rec.Value == nil:
		delete(l.heads, item)
	default:
		if h, err := topics.DecodeSnapshotHead(rec.Value); err == nil && h.ItemID == item {
			l.heads[item] = h
		}
	}
}

// Complete returns the latest snapshot of each item want accepts whose
// chunks are all there (its places in order), and the items whose latest
// head names chunks that are missing or do not match it (torn: a rebuild
// replays those from the start of the record).
func (l *Latest) Complete(want func(item string) bool) (map[string]*Snapshot, []string) {
	out := map[string]*Snapshot{}
	var torn []string
	for item, h := range l.heads {
		if !want(item) {
			continue
		}
		s, ok := l.assemble(h)
		if !ok {
			torn = append(torn, item)
			continue
		}
		out[item] = s
	}
	return out, torn
}

func (l *Latest) assemble(h topics.SnapshotHead) (*Snapshot, bool) {
	s := &Snapshot{Head: h, Places: make([]topics.SnapshotEntry, 0, h.Entries)}
	for i := range h.Chunks {
		v, ok := l.chunks[topics.SnapshotChunkKey(h.ItemID, h.Gen, i)]
		if !ok {
			return nil, false
		}
		c, err := topics.DecodeSnapshotChunk(v)
		if err != nil || c.ItemID != h.ItemID || c.Gen != h.Gen || c.Index != i {
			return nil, false
		}
		s.Places = append(s.Places, c.Entries...)
	}
	return s, len(s.Places) == h.Entries
}

// Load writes s into its item's emptied line through load_snapshot.lua:
// the places a chunk of queue.LoadChunk at a time, then the head's counters.
func Load(ctx context.Context, line *queue.Line, s *Snapshot) error {
	if err := line.LoadPlaces(ctx, s.Head.ItemID, s.Places); err != nil {
		return err
	}
	if err := line.LoadHead(ctx, &s.Head); err != nil {
		return err
	}
	return nil
}

// Before reports whether an admission decided at the item's applied
// offsets applied (topics.AdmissionEvent.Applied) is already in s: decided
// before s's own applied offsets, it ran before s was read. One decided at
// exactly them may or may not be in s; applying it again changes nothing
// (apply_admission.lua passes over tokens no longer waiting).
func (s *Snapshot) Before(applied map[int32]int64) bool {
	less := len(s.Head.Applied) > len(applied)
	for p, off := range applied {
		at, ok := s.Head.Applied[p]
		if !ok || off > at {
			return false
		}
		less = less || off < at
	}
	return less
}

// String names s for logs.
func (s *Snapshot) String() string {
	return fmt.Sprintf("%s gen %s (%d places, through %v)", s.Head.ItemID, s.Head.Gen, len(s.Places), s.Head.Through)
}
