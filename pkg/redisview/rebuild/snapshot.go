package rebuild

import (
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/redisview/snapshot"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// snapshots loads the latest complete snapshot of every item of the record
// (known on waitroom.items and wanted) from waitroom.snapshots, and returns
// the part of waitroom.registrations (regs, its bounds) left to read: each
// partition from the oldest offset a snapshot does not cover. An item
// without one (never snapshotted, torn) is replayed from the start, and so
// keeps every partition's start (which partition holds an item is the
// producer's choice), though the loaded items' records there are passed
// over. With r.full, or without the topic, it loads nothing.
func (b *Rebuilder) snapshots(r *replayer, regs bounds, rep *Report) (bounds, error) {
	if r.full {
		return regs, nil
	}
	cl, err := kgo.NewClient(b.base...)
	if err != nil {
		return nil, fmt.Errorf("kafka admin client: %w", err)
	}
	defer cl.Close()
	bs, err := offsets(r.ctx, kadm.NewClient(cl), topics.Snapshots)
	if err != nil {
		b.log.Warn("no snapshots to read: the record is replayed whole", zap.Error(err))
		return regs, nil
	}
	latest := snapshot.NewLatest()
	if _, err := read(r.ctx, b.base, topics.Snapshots, bs, nil, func(rec *kgo.Record, _ any) error {
		latest.Add(rec)
		return nil
	}); err != nil {
		return nil, err
	}
	snaps, torn := latest.Complete(func(item string) bool { return r.known[item] && r.wanted(item) })
	slices.Sort(torn)
	rep.Torn = torn
	for _, item := range slices.Sorted(maps.Keys(snaps)) {
		if err := r.load(snaps[item]); err != nil {
			return nil, err
		}
	}
	rep.Snapshots = len(snaps)
	for item := range r.known {
		if r.wanted(item) && snaps[item] == nil {
			return regs, nil // replayed from the start (its records are read; the loaded items' are passed over)
		}
	}
	out := bounds{}
	for p, se := range regs {
		from := se[1]
		for _, s := range snaps {
			through, ok := s.Head.Through[p]
			if !ok {
				from = se[0]
				break
			}
			from = min(from, through+1)
		}
		out[p] = [2]int64{max(se[0], from), se[1]}
	}
	return out, nil
}

// load writes s into its item's emptied line, as if the records it covers
// had been replayed: the item's progress is s's offsets, the admissions
// decided before them are dropped (s holds them), and its waiting places
// are known for the sign of life a rebuild gives them (seen).
func (r *replayer) load(s *snapshot.Snapshot) error {
	item := s.Head.ItemID
	if err := r.touch(item); err != nil {
		return err
	}
	if err := snapshot.Load(r.ctx, r.line, s); err != nil {
		return err
	}
	r.snap[item] = s
	r.progress[item] = maps.Clone(s.Head.Through)
	q := r.adm[item][:0]
	for _, a := range r.adm[item] {
		if a.applied == nil && a.at < s.Head.TakenAt || a.applied != nil && s.Before(a.applied) {
			continue
		}
		q = append(q, a)
	}
	r.adm[item] = q
	if r.idle[item] {
		m := map[string]string{}
		for _, e := range s.Places {
			switch line.State(e.State) {
			case line.Waiting, line.Pooled, line.Late:
				if e.User != "" {
					m[e.Token] = e.User
				}
			}
		}
		r.places[item] = m
	}
	return nil
}
