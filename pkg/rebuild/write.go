package rebuild

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/queue"
)

// chunk bounds the members of one command and the commands of one pipeline,
// so no reply or request grows with the line.
const chunk = 5000

// writer batches commands into bounded pipelines.
type writer struct {
	ctx  context.Context
	rdb  redis.UniversalClient
	p    redis.Pipeliner
	args int
}

func (w *writer) add(f func(p redis.Pipeliner), args int) error {
	if w.p == nil {
		w.p = w.rdb.Pipeline()
	}
	f(w.p)
	w.args += args
	if w.args >= 8*chunk {
		return w.flush()
	}
	return nil
}

func (w *writer) flush() error {
	if w.p == nil || w.p.Len() == 0 {
		return nil
	}
	_, err := w.p.Exec(w.ctx)
	w.p, w.args = nil, 0
	if err != nil {
		return fmt.Errorf("write the rebuilt view: %w", err)
	}
	return nil
}

func keysOf(item string) []string {
	k := queue.KeysFor(item)
	return []string{k.Seq, k.Waiting, k.Admitted, k.Users, k.Head, k.State, k.Applied, k.Epoch, k.Pace, k.Paced, k.Unpublished,
		k.Express, k.Bypass, k.Seen, k.Stats, k.Pool, k.Late, k.Drawn}
}

// writeLines replaces every key of the items in r (and of stale, items the
// old view listed that the record does not know) with the rebuilt ones.
// fence is the epoch every item is fenced at: above any epoch ever used.
func writeLines(ctx context.Context, rdb redis.UniversalClient, r Result, stale []string, fence, now int64) error {
	w := &writer{ctx: ctx, rdb: rdb}
	for _, id := range stale {
		keys := keysOf(id)
		if err := w.add(func(p redis.Pipeliner) { p.Del(ctx, keys...) }, len(keys)); err != nil {
			return err
		}
	}
	if err := w.add(func(p redis.Pipeliner) { p.Del(ctx, queue.ActiveItems) }, 1); err != nil {
		return err
	}
	for _, ln := range r.Lines {
		if err := writeLine(ctx, w, ln, fence, now); err != nil {
			return err
		}
	}
	return w.flush()
}

func writeLine(ctx context.Context, w *writer, ln *Line, fence, now int64) (rerr error) {
	k := queue.KeysFor(ln.ID)
	keys := keysOf(ln.ID)
	if err := w.add(func(p redis.Pipeliner) { p.Del(ctx, keys...) }, len(keys)); err != nil {
		return err
	}
	if ln.State != nil {
		s := ln.State
		args := append([]any{"version", itoa(s.Version)}, queue.StateFields(*s)...)
		if err := w.add(func(p redis.Pipeliner) {
			p.HSet(ctx, k.State, args...)
		}, len(args)); err != nil {
			return err
		}
	}
	if ln.Seq > 0 {
		if err := w.add(func(p redis.Pipeliner) { p.Set(ctx, k.Seq, ln.Seq, 0) }, 1); err != nil {
			return err
		}
	}
	if ln.Head > 0 {
		if err := w.add(func(p redis.Pipeliner) { p.Set(ctx, k.Head, ln.Head, 0) }, 1); err != nil {
			return err
		}
	}
	if err := w.add(func(p redis.Pipeliner) { p.Set(ctx, k.Epoch, fence, 0) }, 1); err != nil {
		return err
	}
	if len(ln.Applied) > 0 {
		args := make([]any, 0, 2*len(ln.Applied))
		for part, off := range ln.Applied {
			args = append(args, strconv.Itoa(int(part)), itoa(off))
		}
		if err := w.add(func(p redis.Pipeliner) { p.HSet(ctx, k.Applied, args...) }, len(args)); err != nil {
			return err
		}
	}
	if err := zadd(ctx, w, k.Waiting, ln.Waiting); err != nil {
		return err
	}
	if err := zadd(ctx, w, k.Admitted, ln.Admitted); err != nil {
		return err
	}
	if err := zadd(ctx, w, k.Express, ln.Express); err != nil {
		return err
	}
	if len(ln.Bypass) > 0 {
		args := make([]any, 0, 2*len(ln.Bypass))
		for code, n := range ln.Bypass {
			args = append(args, code, itoa(n))
		}
		if err := w.add(func(p redis.Pipeliner) { p.HSet(ctx, k.Bypass, args...) }, len(args)); err != nil {
			return err
		}
	}
	if err := zadd(ctx, w, k.Seen, ln.Seen); err != nil {
		return err
	}
	if ln.Abandoned > 0 {
		if err := w.add(func(p redis.Pipeliner) { p.HSet(ctx, k.Stats, "abandoned", itoa(ln.Abandoned)) }, 2); err != nil {
			return err
		}
	}
	if err := zadd(ctx, w, k.Pool, ln.Pool); err != nil {
		return err
	}
	if err := zadd(ctx, w, k.Late, ln.Late); err != nil {
		return err
	}
	if ln.DrawnWindow > 0 {
		if err := w.add(func(p redis.Pipeliner) {
			p.HSet(ctx, k.Drawn, "window", itoa(ln.DrawnWindow), "round", itoa(ln.DrawnRound), "commit", ln.DrawnCommit)
		}, 6); err != nil {
			return err
		}
	}
	if ln.LateAfter > 0 {
		if err := w.add(func(p redis.Pipeliner) { p.HSet(ctx, k.Drawn, "lateAfter", itoa(ln.LateAfter)) }, 2); err != nil {
			return err
		}
	}
	// The users map goes over a second connection meanwhile: the client's
	// encoding and the round trips overlap with the sorted sets'.
	if err := w.flush(); err != nil { // the DEL above goes first
		return err
	}
	uerr := make(chan error, 1)
	go func() { uerr <- writeUsers(ctx, w.rdb, k.Users, ln.Users) }()
	defer func() {
		if err := <-uerr; err != nil && rerr == nil {
			rerr = err
		}
	}()
	// The pace: the last minute's admissions as they were; the rate budget
	// starts empty (tokens 0 now), so a rebuild never releases a burst.
	if len(ln.Paced) > 0 || ln.Sum60 > 0 || len(ln.Admitted) > 0 || len(ln.Waiting) > 0 {
		if err := w.add(func(p redis.Pipeliner) {
			p.HSet(ctx, k.Pace, "tokens", "0", "last", itoa(now), "sum60", itoa(ln.Sum60))
		}, 6); err != nil {
			return err
		}
	}
	for lo := 0; lo < len(ln.Paced); lo += chunk {
		part := ln.Paced[lo:min(lo+chunk, len(ln.Paced))]
		a := make([]any, len(part))
		for i, s := range part {
			a[i] = s
		}
		if err := w.add(func(p redis.Pipeliner) { p.RPush(ctx, k.Paced, a...) }, len(a)); err != nil {
			return err
		}
	}
	if ln.Active {
		if err := w.add(func(p redis.Pipeliner) { p.SAdd(ctx, queue.ActiveItems, ln.ID) }, 1); err != nil {
			return err
		}
	}
	return nil
}

func zadd(ctx context.Context, w *writer, key string, ms []Member) error {
	for lo := 0; lo < len(ms); lo += chunk {
		part := ms[lo:min(lo+chunk, len(ms))]
		zs := make([]redis.Z, len(part))
		for i, m := range part {
			zs[i] = redis.Z{Score: float64(m.Score), Member: m.Token}
		}
		if err := w.add(func(p redis.Pipeliner) { p.ZAdd(ctx, key, zs...) }, 2*len(zs)); err != nil {
			return err
		}
	}
	return nil
}

func writeUsers(ctx context.Context, rdb redis.UniversalClient, key string, users map[string]string) error {
	w := &writer{ctx: ctx, rdb: rdb}
	args := make([]any, 0, 2*chunk)
	for u, t := range users {
		args = append(args, u, t)
		if len(args) == 2*chunk {
			a := args
			if err := w.add(func(p redis.Pipeliner) { p.HSet(ctx, key, a...) }, len(a)); err != nil {
				return err
			}
			args = make([]any, 0, 2*chunk)
		}
	}
	if len(args) > 0 {
		if err := w.add(func(p redis.Pipeliner) { p.HSet(ctx, key, args...) }, len(args)); err != nil {
			return err
		}
	}
	return w.flush()
}
