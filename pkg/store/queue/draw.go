package queue

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/topics"
)

var (
	//go:embed draw.lua
	drawLua string
	//go:embed draw_finish.lua
	drawFinishLua string

	drawScript       = redis.NewScript(withPrelude(drawLua))
	drawFinishScript = redis.NewScript(withPrelude(drawFinishLua))
)

// DrawChunk bounds the tokens one draw script call places.
const DrawChunk = 1000

// DrawOp is a draw record to apply: its position and the revealed draw.
type DrawOp struct {
	ItemID    string
	Partition int32
	Offset    int64
	Window    int64 // draws every pooled register with a window <= this
	Round     int64
	Seed      string // hex; already checked against Commit by the caller
	Commit    string
}

// Draw outcomes.
const (
	Drawn Outcome = "DRAWN" // the pool's registrations of the window were placed
	Stale Outcome = "STALE" // a draw of this window or a later one was done: offset recorded only
)

// DrawResult is what a draw did.
type DrawResult struct {
	Outcome Outcome // Drawn, Stale or Replay
	Placed  int64   // pooled registrations placed, in draw order
	Late    int64   // late registrations placed behind them
}

// Draw applies a draw record: it reads the pool's registrations of windows up
// to op.Window, orders them by the seed (pkg/domain/draw.Order) and gives each a seq
// in that order, DrawChunk per script call; then the late registrations in
// record order, once the windows pooled before them are drawn; then it
// records the draw and its offset. Each chunk moves only tokens still pooled, and the order of the
// rest of a set is the rest of its order, so a draw cut short by a crash
// resumes to the same line when the record comes again. The caller applies
// no later record of the partition before Draw returned.
func (l *Line) Draw(ctx context.Context, op DrawOp) (DrawResult, error) {
	k := KeysFor(op.ItemID)
	part, off := strconv.FormatInt(int64(op.Partition), 10), strconv.FormatInt(op.Offset, 10)
	win := strconv.FormatInt(op.Window, 10)
	var ids []string
	for cursor := int64(0); ; {
		page, err := l.rdb.ZRangeByScore(ctx, k.Pool, &redis.ZRangeBy{Min: "-inf", Max: win, Offset: cursor, Count: 10_000}).Result()
		if err != nil {
			return DrawResult{}, fmt.Errorf("read the pool of %s: %w", op.ItemID, err)
		}
		ids = append(ids, page...)
		if len(page) < 10_000 {
			break
		}
		cursor += int64(len(page))
	}
	if err := draw.Order(op.Seed, ids); err != nil {
		return DrawResult{}, fmt.Errorf("draw of %s: %w", op.ItemID, err)
	}
	res := DrawResult{}
	for lo := 0; lo < len(ids); lo += DrawChunk {
		args := []any{part, off, win}
		for _, id := range ids[lo:min(lo+DrawChunk, len(ids))] {
			args = append(args, id)
		}
		v, err := drawScript.Run(ctx, l.rdb, []string{k.Applied, k.Drawn, k.Pool, k.Seq, k.Waiting}, args...).Slice()
		if err != nil {
			return res, fmt.Errorf("draw of %s at offset %d: %w", op.ItemID, op.Offset, err)
		}
		o, n, err := pair(v)
		if err != nil {
			return res, fmt.Errorf("draw of %s: %w", op.ItemID, err)
		}
		if o != "MOVED" {
			return DrawResult{Outcome: Outcome(o)}, nil // REPLAY or STALE: nothing moved
		}
		res.Placed += n
	}
	for {
		v, err := drawFinishScript.Run(ctx, l.rdb, []string{k.Applied, k.Drawn, k.Pool, k.Late, k.Seq, k.Waiting},
			part, off, win, strconv.FormatInt(op.Round, 10), op.Commit).Slice()
		if err != nil {
			return res, fmt.Errorf("finish the draw of %s at offset %d: %w", op.ItemID, op.Offset, err)
		}
		o, n, err := pair(v)
		if err != nil {
			return res, fmt.Errorf("finish the draw of %s: %w", op.ItemID, err)
		}
		switch o {
		case "MORE":
			res.Late += n
		case "DRAWN":
			res.Late += n
			res.Outcome = Drawn
			return res, nil
		case "UNDRAWN": // a registration pooled while we read: cannot happen with one writer per partition
			return res, fmt.Errorf("draw of %s: %d of the window still pooled after the draw", op.ItemID, n)
		default:
			return DrawResult{Outcome: Outcome(o), Placed: res.Placed, Late: res.Late}, nil
		}
	}
}

func pair(v []any) (string, int64, error) {
	if len(v) != 2 {
		return "", 0, fmt.Errorf("script returned %d values, want 2", len(v))
	}
	o, _ := v[0].(string)
	n, _ := v[1].(int64)
	return o, n, nil
}

// DueDraw is an item whose pool holds a window that has closed.
type DueDraw struct {
	Item   string
	Window int64 // the pool's latest window that has closed: the draw places every window up to it
	// LastRound and LastCommit are of the item's last draw (0, "": none).
	LastRound  int64
	LastCommit string
	// Commit, Rounds and Salt are the item's stored commitment.
	Commit string
	Rounds int64
	Salt   string
}

// DueDraws returns the items whose pool's lowest window is at or before
// nowMs, with what a draw of it needs: one pipelined read of every item's
// pool head, and one more of the due ones' latest closed window, last draw
// and commitment. An item whose sale opens after nowMs (opensAt moved later
// while people were pooled) is not due: its whole pre-queue is drawn at the
// new opening. An item with late registrations whose windows were all left
// (everyone pooled before them left) is due too, with Window the last of
// those windows: a draw placing nobody, then them.
func (l *Line) DueDraws(ctx context.Context, items []string, nowMs int64) ([]DueDraw, error) {
	heads := make([]*redis.ZSliceCmd, len(items))
	lates := make([]*redis.IntCmd, len(items))
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range items {
			k := KeysFor(it)
			heads[i] = p.ZRangeWithScores(ctx, k.Pool, 0, 0)
			lates[i] = p.ZCard(ctx, k.Late)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read pools: %w", err)
	}
	var due []DueDraw
	head := map[string]int64{} // the pool's lowest window of a candidate (0: empty pool)
	for i, h := range heads {
		z := h.Val()
		switch {
		case len(z) == 1 && int64(z[0].Score) <= nowMs:
			due = append(due, DueDraw{Item: items[i], Window: int64(z[0].Score)})
		case lates[i].Val() > 0: // may be stranded: decided below
			if len(z) == 1 {
				head[items[i]] = int64(z[0].Score)
			}
			due = append(due, DueDraw{Item: items[i]})
		}
	}
	if len(due) == 0 {
		return nil, nil
	}
	latest := make([]*redis.ZSliceCmd, len(due))
	drawn := make([]*redis.SliceCmd, len(due))
	state := make([]*redis.SliceCmd, len(due))
	now := strconv.FormatInt(nowMs, 10)
	_, err = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, d := range due {
			k := KeysFor(d.Item)
			latest[i] = p.ZRevRangeByScoreWithScores(ctx, k.Pool, &redis.ZRangeBy{Min: "-inf", Max: now, Count: 1})
			drawn[i] = p.HMGet(ctx, k.Drawn, "round", "commit", "lateAfter")
			state[i] = p.HMGet(ctx, k.State, "drawCommit", "drawRounds", "drawSalt", "opensAt")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read draws: %w", err)
	}
	str := func(v any) string { s, _ := v.(string); return s }
	out := due[:0]
	for i, d := range due {
		dr, s := drawn[i].Val(), state[i].Val()
		if opens, _ := strconv.ParseInt(str(s[3]), 10, 64); opens > nowMs {
			continue
		}
		if d.Window == 0 { // late ones: due only when no window before them is pooled any more
			lateAfter, _ := strconv.ParseInt(str(dr[2]), 10, 64)
			if h, pooled := head[d.Item]; lateAfter <= 0 || pooled && h <= lateAfter {
				continue
			}
			d.Window = lateAfter // no pooled window is closed: the head is beyond nowMs
		}
		if z := latest[i].Val(); len(z) == 1 {
			d.Window = max(d.Window, int64(z[0].Score))
		}
		d.LastRound, _ = strconv.ParseInt(str(dr[0]), 10, 64)
		d.LastCommit = str(dr[1])
		d.Commit = str(s[0])
		d.Rounds, _ = strconv.ParseInt(str(s[1]), 10, 64)
		d.Salt = str(s[2])
		out = append(out, d)
	}
	return out, nil
}

// LastDraw is item's last draw: its window, round and commit (0, 0, "": none).
func (l *Line) LastDraw(ctx context.Context, item string) (window, round int64, commit string, err error) {
	v, err := l.rdb.HMGet(ctx, KeysFor(item).Drawn, "window", "round", "commit").Result()
	if err != nil {
		return 0, 0, "", fmt.Errorf("last draw of %s: %w", item, err)
	}
	str := func(v any) string { s, _ := v.(string); return s }
	window, _ = strconv.ParseInt(str(v[0]), 10, 64)
	round, _ = strconv.ParseInt(str(v[1]), 10, 64)
	return window, round, str(v[2]), nil
}

// CheckDraw judges a draw record before it is applied: its revealed seed must
// hash to its commitment in its round, and a new window must not reuse a
// round of the chain already drawn. A draw that fails is wrapped with
// topics.ErrInvalid (the consumer dead-letters it, a rebuild records its
// offset only); any other error is Redis's.
func (l *Line) CheckDraw(ctx context.Context, op DrawOp) error {
	if err := draw.Verify(op.Seed, op.Round, op.Commit); err != nil {
		return fmt.Errorf("%w: draw of window %d: %w", topics.ErrInvalid, op.Window, err)
	}
	w, round, commit, err := l.LastDraw(ctx, op.ItemID)
	if err != nil {
		return err
	}
	if op.Window > w && op.Commit == commit && op.Round <= round {
		return fmt.Errorf("%w: draw of window %d reuses round %d of the chain (round %d was drawn)", topics.ErrInvalid, op.Window, op.Round, round)
	}
	return nil
}

// DrawOf is the draw op of a draw record ev at partition and offset.
func DrawOf(ev *topics.RegistrationEvent, partition int32, offset int64) DrawOp {
	d := ev.Draw
	return DrawOp{ItemID: ev.ItemID, Partition: partition, Offset: offset, Window: d.Window, Round: d.Round, Seed: d.Seed, Commit: d.Commit}
}
