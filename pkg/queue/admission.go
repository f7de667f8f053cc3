package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrFenced is returned by Promote when a leader with a newer epoch has
// promoted the item: the caller lost its lock and must not admit anyone.
var ErrFenced = errors.New("fenced: a newer scheduler epoch owns this item")

// Tick is what one promote did to one item.
type Tick struct {
	Admitted int // admitted by this tick
	// Unpublished are the tokenIds admitted and not yet acknowledged as
	// published (this tick's last), in line order: the next event to publish.
	Unpublished []string
	Head        int64 // highest seq admitted so far
	Waiting     int64 // left in the line
	Active      int64 // admitted and not expired
	Expired     int64 // admissions that ran out during this tick
}

// Promote runs one tick for item under the leader's epoch at now: expired
// admissions are dropped and up to min(rate budget, maxActive - active) people
// are admitted from the front of the line, with the item's session TTL. burst
// bounds how much unused rate the budget keeps. ErrFenced when epoch is stale.
func (l *Line) Promote(ctx context.Context, item string, epoch int64, now time.Time, burst time.Duration) (Tick, error) {
	res, err := l.promote(ctx, l.rdb, item, epoch, now, burst).Slice()
	if err != nil {
		return Tick{}, fmt.Errorf("promote %s: %w", item, err)
	}
	return parseTick(item, res)
}

// PromoteMany runs one tick for every item in one pipelined round; the result
// of item i is ticks[i] or errs[i].
func (l *Line) PromoteMany(ctx context.Context, items []string, epoch int64, now time.Time, burst time.Duration) (ticks []Tick, errs []error, err error) {
	cmds := make([]*redis.Cmd, len(items))
	_, err = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range items {
			cmds[i] = l.promoteSha(ctx, p, it, epoch, now, burst)
		}
		return nil
	})
	if err != nil && isNoScript(err) {
		if lerr := l.Load(ctx); lerr != nil {
			return nil, nil, errors.Join(err, lerr)
		}
		return l.PromoteMany(ctx, items, epoch, now, burst)
	}
	if err != nil && !IsRecordError(err) {
		return nil, nil, fmt.Errorf("promote %d items: %w", len(items), err)
	}
	ticks, errs = make([]Tick, len(items)), make([]error, len(items))
	for i, c := range cmds {
		res, cerr := c.Slice()
		if cerr != nil {
			errs[i] = fmt.Errorf("promote %s: %w", items[i], cerr)
			continue
		}
		ticks[i], errs[i] = parseTick(items[i], res)
	}
	return ticks, errs, nil
}

func promoteArgs(item string, epoch int64, now time.Time, burst time.Duration) ([]string, []any) {
	k := KeysFor(item)
	return []string{k.Waiting, k.Admitted, k.Head, k.Epoch, k.State, k.Pace, k.Paced, k.Unpublished},
		[]any{strconv.FormatInt(epoch, 10), strconv.FormatInt(now.UnixMilli(), 10), strconv.FormatInt(burst.Milliseconds(), 10)}
}

func (l *Line) promote(ctx context.Context, c redis.Scripter, item string, epoch int64, now time.Time, burst time.Duration) *redis.Cmd {
	keys, args := promoteArgs(item, epoch, now, burst)
	return promoteScript.Run(ctx, c, keys, args...)
}

func (l *Line) promoteSha(ctx context.Context, c redis.Scripter, item string, epoch int64, now time.Time, burst time.Duration) *redis.Cmd {
	keys, args := promoteArgs(item, epoch, now, burst)
	return promoteScript.EvalSha(ctx, c, keys, args...)
}

func parseTick(item string, v []any) (Tick, error) {
	if len(v) != 7 {
		return Tick{}, fmt.Errorf("promote %s: script returned %d values", item, len(v))
	}
	if o, _ := v[0].(string); o == "FENCED" {
		return Tick{}, ErrFenced
	}
	t := Tick{}
	n, _ := v[1].(int64)
	t.Admitted = int(n)
	t.Head, _ = v[2].(int64)
	t.Waiting, _ = v[3].(int64)
	t.Active, _ = v[4].(int64)
	t.Expired, _ = v[5].(int64)
	ids, _ := v[6].([]any)
	t.Unpublished = make([]string, 0, len(ids))
	for _, id := range ids {
		s, _ := id.(string)
		t.Unpublished = append(t.Unpublished, s)
	}
	return t, nil
}

// AckPublished forgets the first n unpublished tokenIds of each item (their
// event is on Kafka), in one pipelined round. A fenced epoch changes nothing.
func (l *Line) AckPublished(ctx context.Context, epoch int64, items []string, n []int) error {
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range items {
			k := KeysFor(it)
			ackScript.EvalSha(ctx, p, []string{k.Epoch, k.Unpublished}, strconv.FormatInt(epoch, 10), strconv.Itoa(n[i]))
		}
		return nil
	})
	if err != nil && isNoScript(err) {
		if lerr := l.Load(ctx); lerr != nil {
			return errors.Join(err, lerr)
		}
		return l.AckPublished(ctx, epoch, items, n)
	}
	if err != nil {
		return fmt.Errorf("ack %d published items: %w", len(items), err)
	}
	return nil
}

// Complete ends a live admission at once (the downstream service is done with
// it); ok is false when it was not live (expired, completed before, unknown).
func (l *Line) Complete(ctx context.Context, item, tokenID, userID string) (ok bool, err error) {
	k := KeysFor(item)
	n, err := completeScript.Run(ctx, l.rdb, []string{k.Admitted, k.Users}, tokenID, userID).Int()
	if err != nil {
		return false, fmt.Errorf("complete %s in %s: %w", tokenID, item, err)
	}
	return n == 1, nil
}

// AdmittedUntil returns when tokenID's admission to item expires; ok is false
// when it is not admitted (never, expired and dropped, or completed).
func (l *Line) AdmittedUntil(ctx context.Context, item, tokenID string) (until time.Time, ok bool, err error) {
	ms, err := l.rdb.ZScore(ctx, KeysFor(item).Admitted, tokenID).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("admission of %s in %s: %w", tokenID, item, err)
	}
	return time.UnixMilli(int64(ms)), true, nil
}

// ActiveItems lists the registry of items with a live line.
func (l *Line) ActiveItems(ctx context.Context) ([]string, error) {
	ids, err := l.rdb.SMembers(ctx, ActiveItems).Result()
	if err != nil {
		return nil, fmt.Errorf("active items: %w", err)
	}
	return ids, nil
}

// Stats are an item's counters as stored in Redis.
type Stats struct {
	Waiting, Admitted, Head, Seq, AdmittedLastMinute, Epoch int64
}

// Stats reads an item's counters in one round trip.
func (l *Line) Stats(ctx context.Context, item string) (Stats, error) {
	k := KeysFor(item)
	var w, a *redis.IntCmd
	var head, seq, epoch *redis.StringCmd
	var sum *redis.StringCmd
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		w, a = p.ZCard(ctx, k.Waiting), p.ZCount(ctx, k.Admitted, strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf")
		head, seq, epoch = p.Get(ctx, k.Head), p.Get(ctx, k.Seq), p.Get(ctx, k.Epoch)
		sum = p.HGet(ctx, k.Pace, "sum60")
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Stats{}, fmt.Errorf("stats of %s: %w", item, err)
	}
	num := func(c *redis.StringCmd) int64 { n, _ := strconv.ParseInt(c.Val(), 10, 64); return n }
	return Stats{Waiting: w.Val(), Admitted: a.Val(), Head: num(head), Seq: num(seq), AdmittedLastMinute: num(sum), Epoch: num(epoch)}, nil
}
