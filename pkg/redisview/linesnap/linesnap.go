// Package linesnap takes a canonical snapshot of one item's line in Redis
// (every token with its user, state, seq, position and expiry, plus the
// line's counters and applied offsets) and compares two, so an operator can
// prove that a rebuild of the view from Kafka put back exactly what was there.
package linesnap

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// Format names the snapshot format in its header line.
const Format = "waitroom.linesnap/1"

// Entry is one token of the line.
type Entry struct {
	Token string     `json:"token"`
	User  string     `json:"user,omitempty"` // empty: a token in a set with no user pointing at it (a fault)
	State line.State `json:"state"`          // WAITING, ADMITTED, LEFT, ABANDONED, COMPLETED or GONE (admission expired)
	Seq   int64      `json:"seq,omitempty"`  // WAITING: its place number
	// Position is 1-based, WAITING only.
	Position int64 `json:"position,omitempty"`
	// ExpiresAtMs is when an ADMITTED token's admission ends (unix ms).
	ExpiresAtMs int64 `json:"expiresAtMs,omitempty"`
	// Window is a POOLED token's draw window (unix ms); a LATE one waits
	// for the pending draw.
	Window int64 `json:"window,omitempty"`
}

// Snapshot is one item's line at one moment. Entries are sorted by token, so
// two snapshots of the same line are byte-for-byte the same file.
type Snapshot struct {
	Format string `json:"format"`
	Item   string `json:"item"`
	// TakenAtMs is when it was taken (unix ms); admissions that ended by then
	// count as GONE, whether or not a scheduler tick has dropped them yet.
	// It is not compared.
	TakenAtMs int64            `json:"takenAtMs"`
	Seq       int64            `json:"seq"`     // the last place number handed out
	Head      int64            `json:"head"`    // the highest seq admitted
	Applied   map[string]int64 `json:"applied"` // registrations partition -> highest applied offset
	Count     int              `json:"entries"` // len(Entries), so a cut file is noticed
	Entries   []Entry          `json:"-"`
}

// Take reads item's line from rdb at now (zero: the current time). It reads
// with ZSCAN and HSCAN, so a line of any size costs Redis nothing at once;
// every token there for the whole read is in the snapshot. Take it while the
// item is quiet (paused, consumer stopped) for an exact picture: a tick or a
// registration during the read may show half of itself.
func Take(ctx context.Context, rdb redis.UniversalClient, item string, now time.Time) (*Snapshot, error) {
	if now.IsZero() {
		now = time.Now()
	}
	k := queue.KeysFor(item)
	s := &Snapshot{Format: Format, Item: item, TakenAtMs: now.UnixMilli(), Applied: map[string]int64{}}
	var err error
	if s.Seq, err = getInt(ctx, rdb, k.Seq); err != nil {
		return nil, err
	}
	if s.Head, err = getInt(ctx, rdb, k.Head); err != nil {
		return nil, err
	}
	applied, err := rdb.HGetAll(ctx, k.Applied).Result()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", k.Applied, err)
	}
	for p, off := range applied {
		n, err := strconv.ParseInt(off, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read %s: partition %s: %w", k.Applied, p, err)
		}
		s.Applied[p] = n
	}
	// Waiting first, then admitted: a token promoted between the two reads is
	// seen in both, and admitted wins; the other order could lose it.
	waiting, err := queue.ScanZSet(ctx, rdb, k.Waiting)
	if err != nil {
		return nil, err
	}
	admitted, err := queue.ScanZSet(ctx, rdb, k.Admitted)
	if err != nil {
		return nil, err
	}
	users, err := queue.ScanHash(ctx, rdb, k.Users)
	if err != nil {
		return nil, err
	}
	pool, err := queue.ScanZSet(ctx, rdb, k.Pool)
	if err != nil {
		return nil, err
	}
	late, err := queue.ScanZSet(ctx, rdb, k.Late)
	if err != nil {
		return nil, err
	}
	s.Entries = build(waiting, admitted, users, now.UnixMilli())
	fair(s.Entries, pool, late)
	s.Count = len(s.Entries)
	return s, nil
}

// Of is the snapshot of item's line as Line.Dump read it at one instant,
// every admission ADMITTED with its expiry whatever the time (a dump is
// restored as it was stored; Take classifies at a moment instead).
func Of(item string, d queue.Dump) *Snapshot {
	s := &Snapshot{Format: Format, Item: item, Seq: d.Seq, Head: d.Head, Applied: map[string]int64{}}
	for p, off := range d.Applied {
		s.Applied[strconv.Itoa(int(p))] = off
	}
	s.Entries = build(d.Waiting, d.Admitted, d.Users, math.MinInt64)
	fair(s.Entries, d.Pool, d.Late)
	s.Count = len(s.Entries)
	return s
}

func build(waiting, admitted map[string]float64, users map[string]string, now int64) []Entry {
	order := slices.Collect(maps.Keys(waiting))
	slices.SortFunc(order, func(a, b string) int {
		if c := compareFloat(waiting[a], waiting[b]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	pos := make(map[string]int64, len(order))
	for i, t := range order {
		pos[t] = int64(i + 1)
	}
	byToken := make(map[string]Entry, len(users)+len(waiting))
	place := func(tok, user string) Entry {
		e := Entry{Token: tok, User: user}
		if exp, ok := admitted[tok]; ok && int64(exp) > now {
			e.State, e.ExpiresAtMs = line.Admitted, int64(exp)
		} else if seq, ok := waiting[tok]; ok {
			e.State, e.Seq, e.Position = line.Waiting, int64(seq), pos[tok]
		} else {
			e.State = line.Gone
		}
		return e
	}
	for user, v := range users {
		if tok, ended := queue.UsersValue(v); ended != "" {
			byToken[tok] = Entry{Token: tok, User: user, State: ended}
		} else {
			byToken[tok] = place(tok, user)
		}
	}
	// Tokens in a set that no user points at: shown, so a diff finds them.
	for _, set := range []map[string]float64{waiting, admitted} {
		for tok := range set {
			if _, ok := byToken[tok]; !ok {
				if e := place(tok, ""); e.State != line.Gone {
					byToken[tok] = e
				}
			}
		}
	}
	out := slices.Collect(maps.Values(byToken))
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Token, b.Token) })
	return out
}

// fair marks the entries of pre-queued tokens (pool) and of those queued
// behind a pending draw (late), which build saw as GONE: no set it reads
// holds them.
func fair(entries []Entry, pool, late map[string]float64) {
	for i, e := range entries {
		if e.State != line.Gone {
			continue
		}
		if w, ok := pool[e.Token]; ok {
			entries[i].State, entries[i].Window = line.Pooled, int64(w)
		} else if _, ok := late[e.Token]; ok {
			entries[i].State = line.Late
		}
	}
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func getInt(ctx context.Context, rdb redis.UniversalClient, key string) (int64, error) {
	v, err := rdb.Get(ctx, key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", key, err)
	}
	return v, nil
}

// Write writes s as JSON lines: the header, then one entry per line in token
// order. The same line gives the same bytes (but for takenAtMs).
func (s *Snapshot) Write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(bw)
	s.Count = len(s.Entries)
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("write snapshot of %s: %w", s.Item, err)
	}
	for i := range s.Entries {
		if err := enc.Encode(&s.Entries[i]); err != nil {
			return fmt.Errorf("write snapshot of %s: %w", s.Item, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write snapshot of %s: %w", s.Item, err)
	}
	return nil
}

// Read reads a snapshot Write wrote, checking its format and entry count.
func Read(r io.Reader) (*Snapshot, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<16))
	dec.DisallowUnknownFields()
	s := &Snapshot{}
	if err := dec.Decode(s); err != nil {
		return nil, fmt.Errorf("read snapshot header: %w", err)
	}
	if s.Format != Format {
		return nil, fmt.Errorf("read snapshot: format %q, want %q", s.Format, Format)
	}
	s.Entries = make([]Entry, 0, min(s.Count, 1<<20))
	for {
		var e Entry
		err := dec.Decode(&e)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read snapshot of %s: entry %d: %w", s.Item, len(s.Entries)+1, err)
		}
		s.Entries = append(s.Entries, e)
	}
	if len(s.Entries) != s.Count {
		return nil, fmt.Errorf("read snapshot of %s: %d entries, the header says %d (cut short?)", s.Item, len(s.Entries), s.Count)
	}
	if !slices.IsSortedFunc(s.Entries, func(a, b Entry) int { return strings.Compare(a.Token, b.Token) }) {
		return nil, fmt.Errorf("read snapshot of %s: entries are not in token order", s.Item)
	}
	return s, nil
}

// Diff lists how b differs from a, one readable line per difference: the
// line's counters, applied offsets, then tokens in token order. Empty: the
// same line. takenAtMs is not compared.
func Diff(a, b *Snapshot) []string {
	var d []string
	add := func(format string, args ...any) { d = append(d, fmt.Sprintf(format, args...)) }
	if a.Item != b.Item {
		add("item: %s -> %s", a.Item, b.Item)
	}
	if a.Seq != b.Seq {
		add("seq: %d -> %d", a.Seq, b.Seq)
	}
	if a.Head != b.Head {
		add("head: %d -> %d", a.Head, b.Head)
	}
	parts := slices.Sorted(maps.Keys(a.Applied))
	for p := range b.Applied {
		if _, ok := a.Applied[p]; !ok {
			parts = append(parts, p)
		}
	}
	slices.SortFunc(parts, func(x, y string) int {
		xi, _ := strconv.Atoi(x)
		yi, _ := strconv.Atoi(y)
		return xi - yi
	})
	for _, p := range parts {
		x, okx := a.Applied[p]
		y, oky := b.Applied[p]
		switch {
		case !oky:
			add("applied[%s]: %d -> none", p, x)
		case !okx:
			add("applied[%s]: none -> %d", p, y)
		case x != y:
			add("applied[%s]: %d -> %d", p, x, y)
		}
	}
	i, j := 0, 0
	for i < len(a.Entries) || j < len(b.Entries) {
		switch {
		case j == len(b.Entries) || (i < len(a.Entries) && a.Entries[i].Token < b.Entries[j].Token):
			add("token %s: only in A (%s)", a.Entries[i].Token, a.Entries[i].describe())
			i++
		case i == len(a.Entries) || b.Entries[j].Token < a.Entries[i].Token:
			add("token %s: only in B (%s)", b.Entries[j].Token, b.Entries[j].describe())
			j++
		default:
			if a.Entries[i] != b.Entries[j] {
				add("token %s: %s -> %s", a.Entries[i].Token, a.Entries[i].describe(), b.Entries[j].describe())
			}
			i++
			j++
		}
	}
	return d
}

func (e Entry) describe() string {
	s := string(e.State)
	switch e.State {
	case line.Waiting:
		s += fmt.Sprintf(" seq=%d position=%d", e.Seq, e.Position)
	case line.Admitted:
		s += " expiresAt=" + time.UnixMilli(e.ExpiresAtMs).UTC().Format("2006-01-02T15:04:05.000Z")
	case line.Pooled:
		s += fmt.Sprintf(" window=%d", e.Window)
	}
	if e.User == "" {
		return s + " user=(none)"
	}
	return s + " user=" + e.User
}
