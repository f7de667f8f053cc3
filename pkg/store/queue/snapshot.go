package queue

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/topics"
)

var (
	//go:embed snapshot_busy.lua
	snapshotBusyLua string
	//go:embed load_snapshot.lua
	loadSnapshotLua string

	snapshotBusyScript = redis.NewScript(withPrelude(snapshotBusyLua))
	loadSnapshotScript = redis.NewScript(withPrelude(loadSnapshotLua))
)

// ErrBusy: the line is between the two halves of a change a snapshot must
// not cut (a draw half applied, admissions not yet published); try later.
var ErrBusy = errors.New("the line is mid-change")

// Dump is every key of an item's line a rebuild restores, as stored, read
// at one instant.
type Dump struct {
	Marker                                 string // the item's view marker (view.ItemKey), "" when none
	Seq, Head                              int64
	Applied                                map[int32]int64
	Waiting, Admitted, Pool, Late, Express map[string]float64
	Users, Drawn, Bypass, Stats            map[string]string
	Paced                                  []string
}

// ParseAppliedHash decodes an item's applied hash (KeysFor(item).Applied:
// partition → the next offset of waitroom.registrations to apply), as HGETALL
// returns it.
func ParseAppliedHash(h map[string]string) (map[int32]int64, error) {
	m := make(map[int32]int64, len(h))
	for p, off := range h {
		pi, err1 := strconv.ParseInt(p, 10, 32)
		o, err2 := strconv.ParseInt(off, 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("partition %q, offset %q: %w", p, off, err)
		}
		m[int32(pi)] = o
	}
	return m, nil
}

// dumpTTL bounds how long the copies Dump reads survive a crashed reader.
const dumpTTL = 10 * time.Minute

// dumpScan is how many members one scan step of the copies asks for.
const dumpScan = 10_000

// Dump reads item's line as it was at one instant between two scripts, with
// its view marker markerKey; ErrBusy when snapshot_busy.lua says it is
// mid-change. One MULTI/EXEC checks it, reads the small keys and copies the
// big ones (COPY, in Redis: about 0.1 µs a member, no reply to send); the
// copies are then scanned a page at a time and deleted, so no reply is
// larger than a page however long the line. The copies double the line's
// memory meanwhile.
func (l *Line) Dump(ctx context.Context, item, markerKey string) (Dump, error) {
	k := KeysFor(item)
	var (
		busy                          *redis.Cmd
		marker, seq, head             *redis.StringCmd
		applied, drawn, bypass, stats *redis.MapStringStringCmd
		paced                         *redis.StringSliceCmd
	)
	big := []string{k.Users, k.Waiting, k.Admitted, k.Pool, k.Late, k.Express}
	copies := make([]string, len(big))
	for i, key := range big {
		copies[i] = key + ":dump"
	}
	defer func() { // even when ctx ended: the copies are not left for dumpTTL
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		l.rdb.Unlink(uctx, copies...)
	}()
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		busy = snapshotBusyScript.Eval(ctx, p, []string{k.Drawn, k.Applied, k.Unpublished})
		marker, seq, head = p.Get(ctx, markerKey), p.Get(ctx, k.Seq), p.Get(ctx, k.Head)
		applied, drawn, bypass, stats = p.HGetAll(ctx, k.Applied), p.HGetAll(ctx, k.Drawn), p.HGetAll(ctx, k.Bypass), p.HGetAll(ctx, k.Stats)
		paced = p.LRange(ctx, k.Paced, 0, -1)
		for i, key := range big {
			p.Do(ctx, "COPY", key, copies[i], "REPLACE") // no DB argument: the client's own database
			p.PExpire(ctx, copies[i], dumpTTL)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Dump{}, fmt.Errorf("read the line of %s: %w", item, err)
	}
	if b, _ := busy.Int(); b == 1 {
		return Dump{}, ErrBusy
	}
	d := Dump{Marker: marker.Val(), Drawn: drawn.Val(), Bypass: bypass.Val(),
		Stats: stats.Val(), Paced: paced.Val()}
	if d.Seq, err = intOr0(seq); err == nil {
		d.Head, err = intOr0(head)
	}
	if err != nil {
		return Dump{}, fmt.Errorf("read the line of %s: %w", item, err)
	}
	if d.Applied, err = ParseAppliedHash(applied.Val()); err != nil {
		return Dump{}, fmt.Errorf("read %s: %w", k.Applied, err)
	}
	if d.Users, err = ScanHash(ctx, l.rdb, copies[0]); err != nil {
		return Dump{}, err
	}
	sets := [5]*map[string]float64{&d.Waiting, &d.Admitted, &d.Pool, &d.Late, &d.Express}
	for i, set := range sets {
		if *set, err = ScanZSet(ctx, l.rdb, copies[i+1]); err != nil {
			return Dump{}, err
		}
	}
	return d, nil
}

// ScanHash reads the hash at key with HSCAN, a page at a time.
func ScanHash(ctx context.Context, rdb redis.Cmdable, key string) (map[string]string, error) {
	out := map[string]string{}
	var cursor uint64
	for {
		kv, next, err := rdb.HScan(ctx, key, cursor, "", dumpScan).Result()
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// ScanZSet reads the sorted set at key with ZSCAN, a page at a time.
func ScanZSet(ctx context.Context, rdb redis.Cmdable, key string) (map[string]float64, error) {
	out := map[string]float64{}
	var cursor uint64
	for {
		kv, next, err := rdb.ZScan(ctx, key, cursor, "", dumpScan).Result()
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			f, err := strconv.ParseFloat(kv[i+1], 64)
			if err != nil {
				return nil, fmt.Errorf("scan %s: score of %s: %w", key, kv[i], err)
			}
			out[kv[i]] = f
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

func intOr0(c *redis.StringCmd) (int64, error) {
	if errors.Is(c.Err(), redis.Nil) {
		return 0, nil
	}
	return c.Int64()
}

// loadKeys are load_snapshot.lua's keys of item.
func loadKeys(item string) []string {
	k := KeysFor(item)
	return []string{k.Users, k.Waiting, k.Admitted, k.Pool, k.Late, k.Express, k.Seq, k.Head, k.Applied, k.Drawn, k.Bypass, k.Stats, k.Paced}
}

// LoadPlaces writes places of a snapshot into item's emptied line through
// load_snapshot.lua, one atomic call per chunk of LoadChunk places, and
// registers the item as active when it has any.
func (l *Line) LoadPlaces(ctx context.Context, item string, places []topics.SnapshotEntry) error {
	for lo := 0; lo < len(places); lo += LoadChunk {
		part := places[lo:min(lo+LoadChunk, len(places))]
		args := make([]any, 0, 1+4*len(part))
		args = append(args, "places")
		for _, e := range part {
			args = append(args, e.State, e.Token, e.User, e.Num)
		}
		if err := loadSnapshotScript.Run(ctx, l.rdb, loadKeys(item), args...).Err(); err != nil {
			return fmt.Errorf("load %d places of %s: %w", len(part), item, err)
		}
	}
	if len(places) == 0 { // no register was applied (a register always leaves a place)
		return nil
	}
	return l.AddActive(ctx, item)
}

// LoadChunk bounds the places of one load_snapshot.lua call.
const LoadChunk = 5000

// LoadHead writes a snapshot's counters and small keys into item's emptied
// line through load_snapshot.lua (one atomic call).
func (l *Line) LoadHead(ctx context.Context, h *topics.SnapshotHead) error {
	args := []any{"head", h.Seq, h.Head}
	pairs := func(m map[string]string) {
		args = append(args, 2*len(m))
		for _, f := range slices.Sorted(maps.Keys(m)) {
			args = append(args, f, m[f])
		}
	}
	applied := make(map[string]string, len(h.Applied))
	for p, o := range h.Applied {
		applied[strconv.Itoa(int(p))] = strconv.FormatInt(o, 10)
	}
	pairs(applied)
	pairs(h.Drawn)
	pairs(h.Bypass)
	pairs(h.Stats)
	express := make(map[string]string, len(h.Express))
	for t, s := range h.Express {
		express[t] = strconv.FormatInt(s, 10)
	}
	pairs(express)
	args = append(args, len(h.Paced))
	for _, v := range h.Paced {
		args = append(args, v)
	}
	if err := loadSnapshotScript.Run(ctx, l.rdb, loadKeys(h.ItemID), args...).Err(); err != nil {
		return fmt.Errorf("load the snapshot head of %s: %w", h.ItemID, err)
	}
	return nil
}
