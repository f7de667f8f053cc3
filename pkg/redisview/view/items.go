package view

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// The marker of one item. In Redis Cluster the view's marker (wr:{view})
// lives on one master and an item's line on another: a master restarted
// empty loses the lines it held and not the marker. So each item carries its
// own marker in its own slot, and the view keeps, beside its marker, the
// registry of the items it holds: an item the registry lists whose marker is
// missing (or is another incarnation's) was lost. An item that never had a
// line is not in the registry, so it is never mistaken for a lost one.
const (
	// RegistryKey is a HASH item -> token: the items the view holds, each
	// with the token its marker carries (written when the item is first
	// applied, and by every rebuild of it).
	RegistryKey = "wr:{view}:items"
	// LostKey is a HASH item -> LostItem (JSON): the items found lost, until
	// rebuilt and caught up.
	LostKey = "wr:{view}:lost"
	// SkippedKey is a HASH item -> "partition/offset": the highest
	// registrations record of a lost item the consumer did not apply. One at
	// or after the end its rebuild read up to is applied again (the consumer
	// rewinds there) before the item is trusted.
	SkippedKey = "wr:{view}:skipped"
)

// ItemKey is the marker of item, a STRING holding the item's token, in the
// item's own slot (beside its line).
func ItemKey(item string) string { return "wr:{" + item + "}:view" }

// States of a lost item.
const (
	ItemLost       = "lost"       // found lost, not yet being rebuilt
	ItemRebuilding = "rebuilding" // a rebuild of the item runs
	ItemRebuilt    = "rebuilt"    // rebuilt; the consumer is applying what came meanwhile
)

// LostItem is what the view says of one lost item.
type LostItem struct {
	Since  int64  `json:"since"` // unix ms it was found lost
	State  string `json:"state"`
	Reason string `json:"reason"`
	// Records is how many records the rebuild replays (0 until known), from
	// the end offsets it read at its start; Left how many of them it has
	// not replayed yet.
	Records int64 `json:"records,omitempty"`
	Left    int64 `json:"left,omitempty"`
	// Ends are the registrations' end offsets the rebuild read up to,
	// "partition" -> next offset (set once rebuilt).
	Ends map[string]int64 `json:"ends,omitempty"`
	// Rebuilt is the unix ms it was rebuilt (0 until then).
	Rebuilt int64 `json:"rebuilt,omitempty"`
}

// SinceTime is Since as a time.
func (l LostItem) SinceTime() time.Time { return time.UnixMilli(l.Since) }

// Register records item in the registry with token, and its marker, unless
// the registry already lists it (then nothing is written: a lost item's
// marker is never faked). The marker is written first, so the registry
// never lists an item whose marker was not written.
func Register(ctx context.Context, rdb redis.Cmdable, item, token string) error {
	n, err := rdb.HExists(ctx, RegistryKey, item).Result()
	if err != nil {
		return fmt.Errorf("read the view's registry for %s: %w", item, err)
	}
	if n {
		return nil
	}
	if err := rdb.Set(ctx, ItemKey(item), token, 0).Err(); err != nil {
		return fmt.Errorf("write the marker of %s: %w", item, err)
	}
	if err := rdb.HSetNX(ctx, RegistryKey, item, token).Err(); err != nil {
		return fmt.Errorf("register %s in the view: %w", item, err)
	}
	return nil
}

// MarkItems writes the marker of every item (token) and then lists them in
// the registry: what a rebuild does once their lines are written.
func MarkItems(ctx context.Context, rdb redis.Cmdable, token string, items []string) error {
	const chunk = 1000
	for lo := 0; lo < len(items); lo += chunk {
		part := items[lo:min(lo+chunk, len(items))]
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, it := range part {
				p.Set(ctx, ItemKey(it), token, 0)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("write the items' markers: %w", err)
		}
		args := make([]any, 0, 2*len(part))
		for _, it := range part {
			args = append(args, it, token)
		}
		if err := rdb.HSet(ctx, RegistryKey, args...).Err(); err != nil {
			return fmt.Errorf("register the rebuilt items: %w", err)
		}
	}
	return nil
}

// ReadItems reads the registry and the lost items in one transaction (one
// slot), so a rebuild's switch of both is never seen half done.
func ReadItems(ctx context.Context, rdb redis.Cmdable) (registry map[string]string, lost map[string]LostItem, err error) {
	var r, l *redis.MapStringStringCmd
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		r, l = p.HGetAll(ctx, RegistryKey), p.HGetAll(ctx, LostKey)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read the view's items: %w", err)
	}
	lost = make(map[string]LostItem, len(l.Val()))
	for it, v := range l.Val() {
		lost[it] = decodeLost(v)
	}
	return r.Val(), lost, nil
}

func decodeLost(v string) LostItem {
	var li LostItem
	if json.Unmarshal([]byte(v), &li) != nil || li.State == "" {
		li = LostItem{State: ItemLost, Reason: "unreadable entry: " + v}
	}
	return li
}

// MarkLost records item as lost for reason, unless it is already (the first
// to find it sets since); it returns the entry in Redis.
func MarkLost(ctx context.Context, rdb redis.Cmdable, item, reason string, now time.Time) error {
	b, _ := json.Marshal(LostItem{Since: now.UnixMilli(), State: ItemLost, Reason: reason})
	if err := rdb.HSetNX(ctx, LostKey, item, b).Err(); err != nil {
		return fmt.Errorf("mark %s lost: %w", item, err)
	}
	return nil
}

// SetLost writes item's entry.
func SetLost(ctx context.Context, rdb redis.Cmdable, item string, li LostItem) error {
	b, _ := json.Marshal(li)
	if err := rdb.HSet(ctx, LostKey, item, b).Err(); err != nil {
		return fmt.Errorf("write the lost entry of %s: %w", item, err)
	}
	return nil
}

// Lost reads the entries of items (ok false: the item is not lost).
func Lost(ctx context.Context, rdb redis.Cmdable, items ...string) (map[string]LostItem, map[string]Skip, error) {
	var l, s *redis.SliceCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		l, s = p.HMGet(ctx, LostKey, items...), p.HMGet(ctx, SkippedKey, items...)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read the lost items: %w", err)
	}
	lost, skipped := map[string]LostItem{}, map[string]Skip{}
	for i, it := range items {
		if v, ok := l.Val()[i].(string); ok {
			lost[it] = decodeLost(v)
		}
		if v, ok := s.Val()[i].(string); ok {
			if sk, ok := parseSkip(v); ok {
				skipped[it] = sk
			}
		}
	}
	return lost, skipped, nil
}

// Found ends item's loss: it is rebuilt and caught up.
func Found(ctx context.Context, rdb redis.Cmdable, item string) error {
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, LostKey, item)
		p.HDel(ctx, SkippedKey, item)
		return nil
	})
	if err != nil {
		return fmt.Errorf("end the loss of %s: %w", item, err)
	}
	return nil
}

// Skip is the last registrations record of a lost item left unapplied.
type Skip struct {
	Partition int32
	Offset    int64
}

func parseSkip(v string) (Skip, bool) {
	p, o, ok := strings.Cut(v, "/")
	if !ok {
		return Skip{}, false
	}
	pn, err1 := strconv.ParseInt(p, 10, 32)
	on, err2 := strconv.ParseInt(o, 10, 64)
	return Skip{int32(pn), on}, err1 == nil && err2 == nil
}

var skipScript = redis.NewScript(`local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local o = tonumber(string.match(cur, '/(%d+)$'))
  if o and o >= tonumber(ARGV[3]) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '/' .. ARGV[3])
return 1`)

// Skipped records that the consumer leaves item's record at
// partition/offset unapplied (the highest such offset is kept).
func Skipped(ctx context.Context, rdb redis.Scripter, item string, partition int32, offset int64) error {
	err := skipScript.Run(ctx, rdb, []string{SkippedKey}, item, strconv.Itoa(int(partition)), strconv.FormatInt(offset, 10)).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("record a skipped record of %s: %w", item, err)
	}
	return nil
}

// probe is what the items' own slots say: per item, its marker's token ("":
// missing), its seq (the places ever given), its head (the highest FIFO seq
// admitted) and its changes (the calls of the line's scripts that wrote it,
// queue.Keys.Changes). All three only grow, so a lower one than seen before
// is a node rolled back, such as a replica that was behind when it took
// over: behind by registrations (seq), by admissions (head; those people
// would be admitted again), or by any write at all (changes: a leave, a
// completion or an abandon moves neither seq nor head). Items whose node did
// not answer are left out.
type probe struct {
	token              string
	seq, head, changes int64
}

// probeItems reads the marker, seq, head and changes of items in pipelines
// of bounded size (a Redis Cluster client splits each by node): one round
// trip per node and chunk, one MGET an item (its four keys share its slot).
func probeItems(ctx context.Context, rdb redis.Cmdable, items []string) map[string]probe {
	const chunk = 500
	out := make(map[string]probe, len(items))
	for lo := 0; lo < len(items); lo += chunk {
		part := items[lo:min(lo+chunk, len(items))]
		gets := make([]*redis.SliceCmd, len(part))
		_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, it := range part {
				k := queue.KeysFor(it)
				gets[i] = p.MGet(ctx, ItemKey(it), k.Seq, k.Head, k.Changes)
			}
			return nil
		})
		for i, it := range part {
			v, err := gets[i].Result()
			if err != nil || len(v) != 4 {
				continue // the node did not answer: no verdict on this item
			}
			tok, _ := v[0].(string)
			seq, ok1 := count(v[1])
			head, ok2 := count(v[2])
			if !ok1 || !ok2 {
				continue
			}
			// A count of changes that is not a number (corrupt: the next
			// change resets it to 1) reads 0, lower than any seen before.
			ch, _ := count(v[3])
			out[it] = probe{token: tok, seq: seq, head: head, changes: ch}
		}
	}
	return out
}

// count is an MGET value as a number: 0 when the key is missing (or not a
// STRING), ok false when it is not an integer.
func count(v any) (n int64, ok bool) {
	s, isStr := v.(string)
	if !isStr {
		return 0, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
