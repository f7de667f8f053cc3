// Package blocklist keeps the operator's blocks (userIds and address ranges)
// in memory, fed by the compacted waitroom.blocks topic, so checking a
// registration against them costs no Redis or Kafka call.
package blocklist

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kafka/follow"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// List is the in-memory view of waitroom.blocks. Reads are lock-free;
// updates swap a new index.
type List struct {
	t     *follow.Table[topics.BlockState]
	now   func() time.Time
	index atomic.Pointer[index]
}

// index is one immutable state of the list: users by id, ranges by prefix
// length (an address is masked once per length in use and looked up).
type index struct {
	all    map[string]topics.BlockState // by subject
	users  map[string]topics.BlockState
	ranges map[int]map[netip.Prefix]topics.BlockState
	bits   []int // prefix lengths in use, longest first
}

func build(all map[string]topics.BlockState) *index {
	ix := &index{all: all, users: map[string]topics.BlockState{}, ranges: map[int]map[netip.Prefix]topics.BlockState{}}
	for subj, b := range all {
		if id, ok := strings.CutPrefix(subj, topics.BlockUserPrefix); ok {
			ix.users[id] = b
			continue
		}
		p, err := netip.ParsePrefix(strings.TrimPrefix(subj, topics.BlockIPPrefix))
		if err != nil {
			continue // unreachable: decoded records are validated
		}
		m := ix.ranges[p.Bits()]
		if m == nil {
			m = map[netip.Prefix]topics.BlockState{}
			ix.ranges[p.Bits()] = m
			ix.bits = append(ix.bits, p.Bits())
		}
		m[p] = b
	}
	slices.SortFunc(ix.bits, func(a, b int) int { return b - a })
	return ix
}

// New returns a List reading waitroom.blocks from the start with a client
// built from base (seed brokers, logger...). No consumer group: every
// replica reads the whole topic.
func New(base []kgo.Opt, log *zap.Logger) (*List, error) {
	l := &List{now: time.Now}
	t, err := follow.NewTable(base, topics.Blocks, log, follow.TableOptions[topics.BlockState]{
		Decode:  decode,
		Swapped: func(all map[string]topics.BlockState) { l.index.Store(build(all)) },
		Skip:    "block list skips a malformed record; it blocks nobody (publish a valid one for the subject)",
	})
	if err != nil {
		return nil, err
	}
	l.t = t
	return l, nil
}

func decode(subj string, v []byte) (topics.BlockState, error) {
	b, err := topics.DecodeBlock(v)
	if err == nil && b.Subject != subj {
		err = fmt.Errorf("%w: key %q differs from subject %q", topics.ErrInvalid, subj, b.Subject)
	}
	return b, err
}

// User returns the block on userID that holds now, if any.
func (l *List) User(userID string) (topics.BlockState, bool) {
	if l == nil || userID == "" {
		return topics.BlockState{}, false
	}
	b, ok := l.index.Load().users[userID]
	return b, ok && b.Active(l.now().UnixMilli())
}

// Addr returns the block on a range holding ip (the longest such range)
// that holds now, if any. An unparsable ip is not blocked.
func (l *List) Addr(ip string) (topics.BlockState, bool) {
	if l == nil || ip == "" {
		return topics.BlockState{}, false
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return topics.BlockState{}, false
	}
	a = a.Unmap()
	ix, now := l.index.Load(), l.now().UnixMilli()
	for _, bits := range ix.bits {
		if bits > a.BitLen() {
			continue
		}
		p, err := a.Prefix(bits)
		if err != nil {
			continue
		}
		if b, ok := ix.ranges[bits][p]; ok && b.Active(now) {
			return b, true
		}
	}
	return topics.BlockState{}, false
}

// Check returns the block that refuses a request of userID from ip: the
// user's first, then the address's.
func (l *List) Check(userID, ip string) (topics.BlockState, bool) {
	if b, ok := l.User(userID); ok {
		return b, true
	}
	return l.Addr(ip)
}

// All returns every block the topic holds, expired ones included, by subject.
func (l *List) All() []topics.BlockState {
	all := l.index.Load().all
	out := make([]topics.BlockState, 0, len(all))
	for _, s := range slices.Sorted(maps.Keys(all)) {
		out = append(out, all[s])
	}
	return out
}

// Skipped counts records that could not be decoded; each is logged with
// its offset and the reason.
func (l *List) Skipped() int64 { return l.t.Skipped() }

// Run reads the topic until ctx ends.
func (l *List) Run(ctx context.Context) error { return l.t.Run(ctx) }

// Sync waits until the list has read everything the topic held when Sync was
// called: after it returns, every block published before is in force.
func (l *List) Sync(ctx context.Context) error { return l.t.Sync(ctx) }

// WithClock sets the time blocks expire on (default time.Now); tests inject
// one. It returns l.
func (l *List) WithClock(now func() time.Time) *List {
	l.now = now
	return l
}

// Record is the record that puts b in force (b's subject normalised and
// checked first).
func Record(b topics.BlockState) (*kgo.Record, error) {
	subj, err := topics.BlockSubject(b.Subject)
	if err != nil {
		return nil, err
	}
	b.V, b.Subject = topics.Version, subj
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: topics.Blocks, Key: []byte(subj), Value: topics.Encode(&b)}, nil
}

// Lift is the tombstone that lifts the block on subject.
func Lift(subject string) (*kgo.Record, error) {
	subj, err := topics.BlockSubject(subject)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: topics.Blocks, Key: []byte(subj)}, nil
}
