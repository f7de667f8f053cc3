package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/domain/line"
)

// pacedMs reads the time of a pace entry "ms:n" (0 when there is none).
func pacedMs(entry string) int64 {
	ms, _, _ := strings.Cut(entry, ":")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return n
}

// Place reads tokenID's place in item's line with the item's head, waiting
// count and last-minute pace in one MULTI (all keys share the item's hash
// tag), with the admitted count and when the oldest admission of the last
// minute was; waiting is false when tokenID is not in the line. A bypass
// code's place (express) is at position 1: it is admitted at the next tick.
func (l *Line) Place(ctx context.Context, item, tokenID string) (p line.Place, waiting bool, err error) {
	k := KeysFor(item)
	var head, sum, oldest *redis.StringCmd
	var score *redis.FloatCmd
	var rank, card, active *redis.IntCmd
	var express *redis.FloatCmd
	_, err = l.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		head = pl.Get(ctx, k.Head)
		score = pl.ZScore(ctx, k.Waiting, tokenID)
		rank = pl.ZRank(ctx, k.Waiting, tokenID)
		card = pl.ZCard(ctx, k.Waiting)
		sum = pl.HGet(ctx, k.Pace, "sum60")
		active = pl.ZCard(ctx, k.Admitted)
		oldest = pl.LIndex(ctx, k.Paced, 0)
		express = pl.ZScore(ctx, k.Express, tokenID)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return line.Place{}, false, fmt.Errorf("place of %s in %s: %w", tokenID, item, err)
	}
	if errors.Is(score.Err(), redis.Nil) || errors.Is(rank.Err(), redis.Nil) {
		return line.Place{}, false, nil
	}
	for _, c := range []interface{ Err() error }{score, rank, card} {
		if c.Err() != nil {
			return line.Place{}, false, fmt.Errorf("place of %s in %s: %w", tokenID, item, c.Err())
		}
	}
	num := func(c *redis.StringCmd) int64 { n, _ := strconv.ParseInt(c.Val(), 10, 64); return n }
	p = line.Place{Seq: int64(score.Val()), Head: num(head), Position: rank.Val() + 1, Total: card.Val(), AdmittedLastMinute: num(sum),
		PacedSinceMs: pacedMs(oldest.Val()), Active: active.Val()}
	if express.Err() == nil {
		p.Position = 1
	}
	return p, true, nil
}

// PlaceMany reads the places of tokenIDs in item's line as Place reads each
// one, all in one MULTI (one round trip; every key shares the item's hash
// tag, so it is cluster-safe): the item's five reads once, then three per
// token instead of eight. places[i] and waiting[i] are what Place answers
// for tokenIDs[i] at that instant.
func (l *Line) PlaceMany(ctx context.Context, item string, tokenIDs []string) (places []line.Place, waiting []bool, err error) {
	if len(tokenIDs) == 0 {
		return nil, nil, nil
	}
	k := KeysFor(item)
	var head, sum, oldest *redis.StringCmd
	var card, active *redis.IntCmd
	scores := make([]*redis.FloatCmd, len(tokenIDs))
	ranks := make([]*redis.IntCmd, len(tokenIDs))
	express := make([]*redis.FloatCmd, len(tokenIDs))
	_, err = l.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		head = pl.Get(ctx, k.Head)
		card = pl.ZCard(ctx, k.Waiting)
		sum = pl.HGet(ctx, k.Pace, "sum60")
		active = pl.ZCard(ctx, k.Admitted)
		oldest = pl.LIndex(ctx, k.Paced, 0)
		for i, tok := range tokenIDs {
			scores[i] = pl.ZScore(ctx, k.Waiting, tok)
			ranks[i] = pl.ZRank(ctx, k.Waiting, tok)
			express[i] = pl.ZScore(ctx, k.Express, tok)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("places of %d in %s: %w", len(tokenIDs), item, err)
	}
	num := func(c *redis.StringCmd) int64 { n, _ := strconv.ParseInt(c.Val(), 10, 64); return n }
	base := line.Place{Head: num(head), Total: card.Val(), AdmittedLastMinute: num(sum),
		PacedSinceMs: pacedMs(oldest.Val()), Active: active.Val()}
	places, waiting = make([]line.Place, len(tokenIDs)), make([]bool, len(tokenIDs))
	for i, tok := range tokenIDs {
		score, rank := scores[i], ranks[i]
		if errors.Is(score.Err(), redis.Nil) || errors.Is(rank.Err(), redis.Nil) {
			continue
		}
		for _, c := range []interface{ Err() error }{score, rank, card} {
			if c.Err() != nil {
				return nil, nil, fmt.Errorf("place of %s in %s: %w", tok, item, c.Err())
			}
		}
		p := base
		p.Seq, p.Position = int64(score.Val()), rank.Val()+1
		if express[i].Err() == nil {
			p.Position = 1
		}
		places[i], waiting[i] = p, true
	}
	return places, waiting, nil
}

// UsersValue reads a value of an item's users map (wr:{item}:users): the
// tokenId it names and, for a place that ended, how: LeftLine ("!L",
// leave.lua), Abandoned ("!A", abandon.lua) or Completed ("!C",
// complete.lua); "" for a live place. The one Go reading of the markers the
// scripts write.
func UsersValue(v string) (tokenID string, ended line.State) {
	if len(v) >= 2 && v[0] == '!' {
		switch v[1] {
		case 'L':
			return v[2:], line.LeftLine
		case 'A':
			return v[2:], line.Abandoned
		case 'C':
			return v[2:], line.Completed
		}
	}
	return v, ""
}
