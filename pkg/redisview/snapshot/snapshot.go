// Package snapshot writes periodic snapshots of each item's line to
// waitroom.snapshots and loads them back on a rebuild, so a rebuild's time
// follows the size of the lines, not the length of the record: it loads each
// item's latest complete snapshot and replays only the records after it.
package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/redisview/linesnap"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// ChunkBytes bounds the places of one chunk record (about; the record stays
// under Kafka's default 1 MB message size).
const ChunkBytes = 900_000

// Config of the writer (the consumer's).
type Config struct {
	// Interval is how often the consumer snapshots each item of the
	// partitions it owns; 0 writes none (a rebuild then replays the whole
	// record). The tail a rebuild replays is at most about one interval's
	// records, plus for a line of 10,000 entries or more up to one line's
	// worth (Writer.Due), and never more than ten intervals' records.
	Interval time.Duration `env:"WR_SNAPSHOT_INTERVAL" envDefault:"1m"`
}

// Snapshot is one snapshot of an item's line: its head and its places.
type Snapshot struct {
	Head   topics.SnapshotHead
	Places []topics.SnapshotEntry
}

// ErrNotTrusted: the view or the item is being rebuilt or lost (or was
// while the line was read); try at the next round.
var ErrNotTrusted = errors.New("the view or the item is not trusted")

// Take reads item's line at one instant (queue.Line.Dump) with the offsets
// it covers: Through is what the view had applied of waitroom.registrations
// (read before the line), so every record of the item up to it is in the
// line. It returns ErrNotTrusted while the view or the item is being
// rebuilt or lost (what the line holds then is not the record's), and
// queue.ErrBusy mid-change.
func Take(ctx context.Context, rdb redis.UniversalClient, item string, now time.Time) (*Snapshot, error) {
	before, err := trusted(ctx, rdb, item)
	if err != nil {
		return nil, err
	}
	through := map[int32]int64{}
	for f, next := range before.marker.Applied {
		if t, p, ok := view.ParseField(f); ok && t == topics.Registrations {
			through[p] = next - 1
		}
	}
	d, err := queue.New(rdb).Dump(ctx, item, view.ItemKey(item))
	if err != nil {
		return nil, err
	}
	// A rebuild marks the view or the item before it empties a line and
	// writes a new registry token after: the same marks on both sides of
	// the read prove no rebuild touched the line meanwhile.
	after, err := trusted(ctx, rdb, item)
	if err != nil {
		return nil, err
	}
	if after.marker.Gen != before.marker.Gen || after.token != before.token || d.Marker != before.token {
		return nil, ErrNotTrusted
	}
	for p, off := range d.Applied {
		through[p] = max(through[p], off)
	}
	ls := linesnap.Of(item, d)
	s := &Snapshot{Head: topics.SnapshotHead{V: 1, ItemID: item, Gen: newGen(now), TakenAt: now.UnixMilli(),
		Applied: d.Applied, Through: through, Seq: d.Seq, Head: d.Head, Entries: len(ls.Entries),
		Drawn: d.Drawn, Bypass: d.Bypass, Stats: d.Stats, Paced: d.Paced, Express: map[string]int64{}}}
	for t, seq := range d.Express {
		s.Head.Express[t] = int64(seq)
	}
	s.Places = make([]topics.SnapshotEntry, len(ls.Entries))
	for i, e := range ls.Entries {
		n := int64(0)
		switch e.State {
		case line.Waiting:
			n = e.Seq
		case line.Admitted:
			n = e.ExpiresAtMs
		case line.Pooled:
			n = e.Window
		case line.Late:
			n = int64(d.Late[e.Token])
		}
		s.Places[i] = topics.SnapshotEntry{State: string(e.State), Token: e.Token, User: e.User, Num: n}
	}
	return s, nil
}

// maxRecord bounds one encoded record (Kafka's default message size is
// 1 MB).
const maxRecord = 1_000_000 - 16<<10

// Chunks cuts s's places into chunk records of at most about budget bytes
// each (ChunkBytes when 0), and sets the head's chunk count.
func (s *Snapshot) Chunks(budget int) []topics.SnapshotChunk {
	if budget <= 0 {
		budget = ChunkBytes
	}
	var out []topics.SnapshotChunk
	lo, size := 0, 0
	cut := func(hi int) {
		out = append(out, topics.SnapshotChunk{V: 1, ItemID: s.Head.ItemID, Gen: s.Head.Gen, Index: len(out), Entries: s.Places[lo:hi]})
		lo, size = hi, 0
	}
	for i, e := range s.Places {
		n := len(e.State) + len(e.Token) + len(e.User) + 40 // JSON's names, quotes and a number
		if size+n > budget && i > lo {
			cut(i)
		}
		size += n
	}
	if lo < len(s.Places) {
		cut(len(s.Places))
	}
	s.Head.Chunks = len(out)
	return out
}

// Records are the records that publish s: its chunks, then its head (a
// head is produced only after its chunks are acknowledged: see Writer).
// Places whose JSON is longer than their length (escaped characters) are
// cut again with a smaller budget until every chunk fits in maxRecord.
func (s *Snapshot) Records() (chunks []*kgo.Record, head *kgo.Record) {
	for budget := ChunkBytes; ; budget /= 2 {
		chunks = chunks[:0]
		fits := true
		for _, c := range s.Chunks(budget) {
			v := topics.Encode(&c)
			if len(v) > maxRecord && len(c.Entries) > 1 {
				fits = false
				break
			}
			chunks = append(chunks, &kgo.Record{Topic: topics.Snapshots, Key: []byte(topics.SnapshotChunkKey(c.ItemID, c.Gen, c.Index)), Value: v})
		}
		if fits {
			break
		}
	}
	return chunks, &kgo.Record{Topic: topics.Snapshots, Key: []byte(s.Head.ItemID), Value: topics.Encode(&s.Head)}
}

// trust is what says a line may be snapshotted: the view's marker (ready)
// and the item's registry token ("": not registered).
type trust struct {
	marker view.Marker
	token  string
}

// trusted reads the view's marker and the item's registry entry, and
// returns ErrNotTrusted unless the view is ready and the item not lost.
func trusted(ctx context.Context, rdb redis.UniversalClient, item string) (trust, error) {
	m, ok, err := view.Read(ctx, rdb)
	if err != nil {
		return trust{}, err
	}
	if !ok || m.State != view.Ready {
		return trust{}, ErrNotTrusted
	}
	token, err := rdb.HGet(ctx, view.RegistryKey, item).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return trust{}, fmt.Errorf("read the view's registry for %s: %w", item, err)
	}
	lost, _, err := view.Lost(ctx, rdb, item)
	if err != nil {
		return trust{}, err
	}
	if _, ok := lost[item]; ok {
		return trust{}, ErrNotTrusted
	}
	return trust{marker: m, token: token}, nil
}

func newGen(now time.Time) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return strconv.FormatInt(now.UnixMilli(), 36) + "-" + hex.EncodeToString(r[:])
}

// Writer publishes snapshots of the items it is given, every interval.
type Writer struct {
	rdb  redis.UniversalClient
	kc   *kgo.Client
	log  *zap.Logger
	prev map[string]topics.SnapshotHead // per item: the last head this writer published
}

// NewWriter returns a Writer reading the lines in rdb and producing with kc
// (acks from all in-sync replicas).
func NewWriter(rdb redis.UniversalClient, kc *kgo.Client, log *zap.Logger) *Writer {
	return &Writer{rdb: rdb, kc: kc, log: log, prev: map[string]topics.SnapshotHead{}}
}

// Write takes and publishes one snapshot of item: its chunks, and once
// Kafka has them all, its head; then the chunks of the snapshot this writer
// published before are deleted (tombstones). A crash between leaves chunks
// no head names (ignored by a rebuild), never a head without its chunks.
// It returns the head, or ErrNotTrusted or queue.ErrBusy (nothing written).
func (w *Writer) Write(ctx context.Context, item string) (topics.SnapshotHead, error) {
	s, err := Take(ctx, w.rdb, item, time.Now())
	if err != nil {
		return topics.SnapshotHead{}, err
	}
	chunks, head := s.Records()
	if err := w.kc.ProduceSync(ctx, chunks...).FirstErr(); err != nil {
		return topics.SnapshotHead{}, fmt.Errorf("publish the snapshot chunks of %s: %w", item, err)
	}
	if err := w.kc.ProduceSync(ctx, head).FirstErr(); err != nil {
		return topics.SnapshotHead{}, fmt.Errorf("publish the snapshot head of %s: %w", item, err)
	}
	if old, ok := w.prev[item]; ok {
		tombs := make([]*kgo.Record, old.Chunks)
		for i := range tombs {
			tombs[i] = &kgo.Record{Topic: topics.Snapshots, Key: []byte(topics.SnapshotChunkKey(item, old.Gen, i))}
		}
		if err := w.kc.ProduceSync(ctx, tombs...).FirstErr(); err != nil {
			w.log.Warn("delete the chunks of an older snapshot (left for compaction's next pass)", zap.String("item", item), zap.Error(err))
		}
	}
	w.prev[item] = s.Head
	return s.Head, nil
}

// Run writes a snapshot of each item items lists every interval until ctx
// ends, when Due. An item that cannot be snapshotted now is tried at the
// next round.
func (w *Writer) Run(ctx context.Context, every time.Duration, items func() []string) error {
	if every <= 0 {
		return nil
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		ids := items()
		n := 0
		for _, it := range ids {
			if ctx.Err() != nil {
				return nil
			}
			if !w.Due(ctx, it, every, time.Now()) {
				continue
			}
			switch _, err := w.Write(ctx, it); {
			case err == nil:
				n++
			case errors.Is(err, ErrNotTrusted) || errors.Is(err, queue.ErrBusy):
			default:
				w.log.Warn("snapshot a line", zap.String("item", it), zap.Error(err))
			}
		}
		for it := range maps.Clone(w.prev) {
			if !contains(ids, it) {
				delete(w.prev, it) // no longer ours: another writer's snapshots replace it
			}
		}
		w.log.Debug("line snapshots written", zap.Int("items", n), zap.Int("of", len(ids)))
	}
}

// The bounds of Due's skips: a line of fewer than skipFrom entries is
// snapshotted every round (its Dump holds Redis a few ms at most); a
// snapshot is never skipped maxSkips rounds in a row (the latest is at most
// that many intervals old, far within any retention the retention check
// accepts).
const (
	skipFrom = 10_000
	maxSkips = 10
)

// Due reports whether item's snapshot is worth writing at now, every being
// the writer's interval. A Dump holds Redis for a time that grows with the
// line's entries (its COPY of the big keys: about 0.8 µs an entry), so a
// line of skipFrom entries or more is snapshotted again only once the
// records applied to it since this writer's last snapshot of it (the sum
// over its partitions of how far its applied offsets moved: at least the
// records it applied, at most what a rebuild from that snapshot replays up
// to them) reach the entries of that snapshot, or maxSkips intervals after
// it. A rebuild then replays at most about one line's worth of records more
// than one interval's, and the Dump's hold of Redis is at most one entry's
// copy per record applied. Without a snapshot of item by this writer, or
// when the offsets cannot be read, it is due.
func (w *Writer) Due(ctx context.Context, item string, every time.Duration, now time.Time) bool {
	prev, ok := w.prev[item]
	if !ok || prev.Entries < skipFrom || now.Sub(time.UnixMilli(prev.TakenAt)) >= maxSkips*every {
		return true
	}
	h, err := w.rdb.HGetAll(ctx, queue.KeysFor(item).Applied).Result()
	if err != nil {
		return true // Write reads them again, and says what failed
	}
	applied, err := queue.ParseAppliedHash(h)
	if err != nil {
		return true
	}
	var since int64
	for p, o := range applied {
		since += max(0, o-prev.Applied[p])
	}
	return since >= int64(prev.Entries)
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
