package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrFenced is returned by Promote when a leader with a newer epoch has
// promoted the item: the caller lost its lock and must not admit anyone.
var ErrFenced = errors.New("fenced: a newer scheduler epoch owns this item")

// MaxAdmitPerCall bounds how many people one promote script call admits: a
// bigger tick runs as several slices, each atomic on its own and charging the
// budget for what it admitted, so no call holds Redis long or builds an
// unbounded reply.
const MaxAdmitPerCall = 20_000

// UnpublishedPage bounds how many unpublished tokenIds a promote returns (and
// the scheduler reads at once): the rest are read page by page after the first
// pages are acknowledged.
const UnpublishedPage = 20_000

// Tick is what one promote did to one item.
type Tick struct {
	Admitted int // admitted by this tick
	// Unpublished are the first tokenIds (at most UnpublishedPage) admitted
	// and not yet acknowledged as published (this tick's last), in line
	// order: the next event to publish.
	Unpublished []string
	// Admits are the same admissions with what their event carries besides
	// the tokenId (same order as Unpublished).
	Admits []Admit
	// UnpublishedTotal is how many tokenIds wait to be published, counting
	// those beyond the first page (see Line.Unpublished).
	UnpublishedTotal int64
	Head             int64 // highest seq admitted so far
	Waiting          int64 // left in the line
	Active           int64 // admitted and not expired
	Expired          int64 // admissions that ran out during this tick
	// More is set when MaxAdmitPerCall cut the call short: the tick goes on
	// with another slice (Promote and PromoteMany do that by themselves).
	More bool
}

// Promote runs one tick for item under the leader's epoch at now: expired
// admissions are dropped and up to min(rate budget, maxActive - active) people
// are admitted from the front of the line, with the item's session TTL. burst
// bounds how much unused rate the budget keeps. ErrFenced when epoch is stale.
// A tick that admits more than MaxAdmitPerCall runs as several slices, each
// atomic on its own.
func (l *Line) Promote(ctx context.Context, item string, epoch int64, now time.Time, burst time.Duration) (Tick, error) {
	tk, err := l.promoteSlice(ctx, item, epoch, now, burst, UnpublishedPage)
	if err != nil {
		return Tick{}, err
	}
	return l.finishTick(ctx, item, epoch, now, burst, tk)
}

func (l *Line) promoteSlice(ctx context.Context, item string, epoch int64, now time.Time, burst time.Duration, page int) (Tick, error) {
	keys, args := promoteArgs(item, epoch, now, burst, page)
	res, err := promoteScript.Run(ctx, l.rdb, keys, args...).Slice()
	if err != nil {
		return Tick{}, fmt.Errorf("promote %s: %w", item, err)
	}
	return parseTick(item, res)
}

// finishTick runs the slices left of a tick whose first slice was tk, and
// returns the whole tick.
func (l *Line) finishTick(ctx context.Context, item string, epoch int64, now time.Time, burst time.Duration, tk Tick) (Tick, error) {
	if !tk.More {
		return tk, nil
	}
	for tk.More {
		// The slices after the first return no page: it is read once at the end.
		next, err := l.promoteSlice(ctx, item, epoch, now, burst, 0)
		if err != nil {
			// The slices before were applied: their admissions are in the
			// unpublished list, which the next tick hands out again.
			return Tick{}, fmt.Errorf("after admitting %d: %w", tk.Admitted, err)
		}
		next.Admitted += tk.Admitted
		next.Expired += tk.Expired
		tk = next
	}
	page, err := l.AdmitPage(ctx, item, UnpublishedPage)
	if err != nil {
		return Tick{}, fmt.Errorf("after admitting %d: %w", tk.Admitted, err)
	}
	tk.Admits, tk.Unpublished = page, tokensOf(page)
	return tk, nil
}

// PromoteMany runs one tick for every item in one pipelined round (plus one
// more call for each further slice of a tick bigger than MaxAdmitPerCall);
// the result of item i is ticks[i] or errs[i]. Scripts missing from Redis
// (NOSCRIPT: a restart or a flush) are loaded and the items they failed run
// once more; the items that ran are not run again.
func (l *Line) PromoteMany(ctx context.Context, items []string, epoch int64, now time.Time, burst time.Duration) (ticks []Tick, errs []error, err error) {
	ticks, errs = make([]Tick, len(items)), make([]error, len(items))
	todo := make([]int, len(items))
	for i := range todo {
		todo[i] = i
	}
	for try := 0; len(todo) > 0; try++ {
		cmds := make([]*redis.Cmd, len(todo))
		_, err = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j, i := range todo {
				cmds[j] = l.promoteSha(ctx, p, items[i], epoch, now, burst)
			}
			return nil
		})
		if err != nil && !isNoScript(err) && !IsRecordError(err) {
			return nil, nil, fmt.Errorf("promote %d items: %w", len(todo), err)
		}
		var again []int
		for j, i := range todo {
			res, cerr := cmds[j].Slice()
			if isNoScript(cerr) && try == 0 {
				again = append(again, i)
				continue
			}
			if cerr != nil {
				errs[i] = fmt.Errorf("promote %s: %w", items[i], cerr)
				continue
			}
			ticks[i], errs[i] = parseTick(items[i], res)
		}
		if len(again) > 0 {
			if lerr := l.Load(ctx); lerr != nil {
				return nil, nil, fmt.Errorf("promote %d items: %w", len(again), errors.Join(err, lerr))
			}
		}
		todo = again
	}
	for i := range items {
		if errs[i] == nil && ticks[i].More {
			ticks[i], errs[i] = l.finishTick(ctx, items[i], epoch, now, burst, ticks[i])
		}
	}
	return ticks, errs, nil
}

func promoteArgs(item string, epoch int64, now time.Time, burst time.Duration, page int) ([]string, []any) {
	k := KeysFor(item)
	return []string{k.Waiting, k.Admitted, k.Head, k.Epoch, k.State, k.Pace, k.Paced, k.Unpublished, k.Express, k.Applied, k.Drawn, k.Changes},
		[]any{strconv.FormatInt(epoch, 10), strconv.FormatInt(now.UnixMilli(), 10), strconv.FormatInt(burst.Milliseconds(), 10),
			strconv.Itoa(MaxAdmitPerCall), strconv.Itoa(page)}
}

func (l *Line) promoteSha(ctx context.Context, c redis.Scripter, item string, epoch int64, now time.Time, burst time.Duration) *redis.Cmd {
	keys, args := promoteArgs(item, epoch, now, burst, UnpublishedPage)
	return promoteScript.EvalSha(ctx, c, keys, args...)
}

func parseTick(item string, v []any) (Tick, error) {
	if len(v) != 9 {
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
	raw := make([]string, 0, len(ids))
	for _, id := range ids {
		s, _ := id.(string)
		raw = append(raw, s)
	}
	t.Admits, t.Unpublished = parsePending(raw)
	t.UnpublishedTotal, _ = v[7].(int64)
	more, _ := v[8].(int64)
	t.More = more == 1
	return t, nil
}

// Unpublished reads the first n (at most UnpublishedPage) tokenIds of item
// admitted and not yet acknowledged as published: the next page to publish
// once the pages before it were acknowledged.
func (l *Line) Unpublished(ctx context.Context, item string, n int) ([]string, error) {
	p, err := l.AdmitPage(ctx, item, n)
	return tokensOf(p), err
}

// AdmitPage is Unpublished with what each admission's event carries.
func (l *Line) AdmitPage(ctx context.Context, item string, n int) ([]Admit, error) {
	n = min(n, UnpublishedPage)
	if n <= 0 {
		return nil, nil
	}
	raw, err := l.rdb.LRange(ctx, KeysFor(item).Unpublished, 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("unpublished of %s: %w", item, err)
	}
	p, _ := parsePending(raw)
	return p, nil
}

// Admit is one admission promote wrote and the scheduler has not published
// yet: what its event says of it.
type Admit struct {
	Token string
	// ExpiresAt is when the admission ends (unix ms; 0: an entry written
	// before it was kept there).
	ExpiresAt int64
	// Applied is the item's applied registrations offsets when promote
	// decided it (partition -> offset; nil: not known, an older entry).
	Applied map[int32]int64
}

// parsePending decodes unpublished entries ("tokenId", or
// "tokenId<TAB>expiry<TAB>mark" as the prelude's admit writes them) and
// returns them with their tokenIds alone. Entries of one tick share one
// Applied map.
func parsePending(raw []string) ([]Admit, []string) {
	out, toks := make([]Admit, len(raw)), make([]string, len(raw))
	var lastMark string
	var lastApplied map[int32]int64
	for i, e := range raw {
		tok, rest, ok := strings.Cut(e, "\t")
		out[i].Token, toks[i] = tok, tok
		if !ok {
			continue
		}
		exp, mark, _ := strings.Cut(rest, "\t")
		out[i].ExpiresAt, _ = strconv.ParseInt(exp, 10, 64)
		if mark != lastMark || lastApplied == nil {
			lastMark, lastApplied = mark, ParseApplied(mark)
		}
		out[i].Applied = lastApplied
	}
	return out, toks
}

func tokensOf(p []Admit) []string {
	if p == nil {
		return nil
	}
	out := make([]string, len(p))
	for i := range p {
		out[i] = p[i].Token
	}
	return out
}

// ParseApplied decodes the applied offsets promote marks an admission with
// ("partition:offset,..."; "" is an item with no registration applied: an
// empty map). Unreadable pairs are skipped.
func ParseApplied(mark string) map[int32]int64 {
	m := map[int32]int64{}
	for mark != "" {
		var pair string
		pair, mark, _ = strings.Cut(mark, ",")
		p, o, ok := strings.Cut(pair, ":")
		if !ok {
			continue
		}
		part, err1 := strconv.ParseInt(p, 10, 32)
		off, err2 := strconv.ParseInt(o, 10, 64)
		if err1 == nil && err2 == nil {
			m[int32(part)] = off
		}
	}
	return m
}

// AckPublished forgets the first n unpublished tokenIds of each item (their
// event is on Kafka), in one pipelined round. A fenced epoch changes nothing.
// Acks refused with NOSCRIPT are sent once more after loading the scripts.
func (l *Line) AckPublished(ctx context.Context, epoch int64, items []string, n []int) error {
	todo := make([]int, len(items))
	for i := range todo {
		todo[i] = i
	}
	for try := 0; ; try++ {
		cmds := make([]*redis.Cmd, len(todo))
		_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for j, i := range todo {
				k := KeysFor(items[i])
				cmds[j] = ackScript.EvalSha(ctx, p, []string{k.Epoch, k.Unpublished}, strconv.FormatInt(epoch, 10), strconv.Itoa(n[i]))
			}
			return nil
		})
		if err == nil {
			return nil
		}
		if !isNoScript(err) || try > 0 {
			return fmt.Errorf("ack %d published items: %w", len(todo), err)
		}
		var again []int // each ack trims its own item: only the refused ones run again
		for j, i := range todo {
			if cerr := cmds[j].Err(); isNoScript(cerr) {
				again = append(again, i)
			} else if cerr != nil {
				return fmt.Errorf("ack published %s: %w", items[i], cerr)
			}
		}
		if lerr := l.Load(ctx); lerr != nil {
			return fmt.Errorf("ack %d published items: %w", len(again), errors.Join(err, lerr))
		}
		todo = again
	}
}

// Complete ends a live admission at once (the downstream service is done with
// it); ok is false when it was not live (expired, completed before, unknown).
func (l *Line) Complete(ctx context.Context, item, tokenID, userID string) (ok bool, err error) {
	k := KeysFor(item)
	n, err := completeScript.Run(ctx, l.rdb, []string{k.Admitted, k.Users, k.Waiting, k.Changes}, tokenID, userID).Int()
	if err != nil {
		return false, fmt.Errorf("complete %s in %s: %w", tokenID, item, err)
	}
	return n == 1, nil
}

// AdmittedUntil returns when tokenID's admission to item expires, to tell
// it; ok is false when it is not admitted (never, expired and dropped, or
// completed) or its admission is not on waitroom.admissions yet (still in
// the unpublished list).
func (l *Line) AdmittedUntil(ctx context.Context, item, tokenID string) (until time.Time, ok bool, err error) {
	return l.admittedUntil(ctx, item, tokenID, "told")
}

// HeldUntil is AdmittedUntil for the holder of the admission's token
// (verify, complete): it was told from a published admission, so the
// scheduler's acknowledgement of the publish is not waited for (the
// notifier tells it from the topic, often before that acknowledgement).
func (l *Line) HeldUntil(ctx context.Context, item, tokenID string) (until time.Time, ok bool, err error) {
	return l.admittedUntil(ctx, item, tokenID, "")
}

func (l *Line) admittedUntil(ctx context.Context, item, tokenID, mode string) (until time.Time, ok bool, err error) {
	k := KeysFor(item)
	ms, err := admittedScript.Run(ctx, l.rdb, []string{k.Admitted, k.Unpublished}, tokenID, mode).Float64()
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

// AddActive writes items back to the registry of items with a live line
// (SADD: a no-op for those it lists).
func (l *Line) AddActive(ctx context.Context, items ...string) error {
	if len(items) == 0 {
		return nil
	}
	args := make([]any, len(items))
	for i, it := range items {
		args[i] = it
	}
	if err := l.rdb.SAdd(ctx, ActiveItems, args...).Err(); err != nil {
		return fmt.Errorf("add %d items to %s: %w", len(items), ActiveItems, err)
	}
	return nil
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

// Settled is one item's line once a rebuild settled it.
type Settled struct {
	Waiting, Admitted int64
}

// Settle ends a rebuild's replay of items at now as their next tick would
// find them (settle.lua): expired admissions dropped, the pace window pruned,
// the rate budget empty, and each item fenced at epoch. One pipelined round
// per ApplyChunk items, with EVALSHA: call Load first.
func (l *Line) Settle(ctx context.Context, items []string, now, epoch int64) ([]Settled, error) {
	out := make([]Settled, len(items))
	for lo := 0; lo < len(items); lo += ApplyChunk {
		part := items[lo:min(lo+ApplyChunk, len(items))]
		cmds := make([]*redis.Cmd, len(part))
		_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, it := range part {
				k := KeysFor(it)
				cmds[i] = settleScript.EvalSha(ctx, p, []string{k.Waiting, k.Admitted, k.Paced, k.Pace, k.Express, k.Epoch},
					strconv.FormatInt(now, 10), strconv.FormatInt(epoch, 10))
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("settle %d rebuilt items: %w", len(part), err)
		}
		for i, c := range cmds {
			v, err := c.Int64Slice()
			if err != nil || len(v) != 2 {
				return nil, fmt.Errorf("settle %s: %v answered %v", part[i], err, v)
			}
			out[lo+i] = Settled{Waiting: v[0], Admitted: v[1]}
		}
	}
	return out, nil
}

// HoldsAdmissions says whether item's line already holds admissions that a
// leader of epoch decided for tokenIDs: the item's fence has seen epoch,
// and none of tokenIDs waits in the line any more (an admission moves its
// token out of it). A view rolled back to before those admissions would
// have the tokens waiting again, or an older epoch; a view that lost their
// registrations too is older than the registrations' record, which the
// view's record check judges on its own. With expires (the tick's recorded
// expiries, same order), a token still admitted must be admitted until its
// own: one admitted again by a later tick after such a rollback is not
// taken for this tick's. A read, in one round trip.
func (l *Line) HoldsAdmissions(ctx context.Context, item string, epoch int64, tokenIDs []string, expires []int64) (bool, error) {
	k := KeysFor(item)
	var seen *redis.StringCmd
	var waiting, express, admitted *redis.FloatSliceCmd
	_, err := l.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		seen = p.Get(ctx, k.Epoch)
		if len(tokenIDs) > 0 {
			waiting = p.ZMScore(ctx, k.Waiting, tokenIDs...)
			express = p.ZMScore(ctx, k.Express, tokenIDs...)
			admitted = p.ZMScore(ctx, k.Admitted, tokenIDs...)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("read the admissions of epoch %d in %s: %w", epoch, item, err)
	}
	if e, perr := strconv.ParseInt(seen.Val(), 10, 64); perr != nil || e < epoch {
		return false, nil
	}
	if waiting == nil {
		return true, nil
	}
	for _, c := range []*redis.FloatSliceCmd{waiting, express, admitted} {
		if c.Err() != nil {
			return false, fmt.Errorf("read the admissions of epoch %d in %s: %w", epoch, item, c.Err())
		}
	}
	// ZMSCORE answers nil (read as 0 by go-redis) for a member not in the
	// set; seqs and express scores are >= 1.
	for i := range tokenIDs {
		if waiting.Val()[i] != 0 || express.Val()[i] != 0 {
			return false, nil
		}
		if a := admitted.Val()[i]; a != 0 && i < len(expires) && int64(a) != expires[i] {
			return false, nil
		}
	}
	return true, nil
}
