package sitehealth

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/domain/steer"
)

//go:embed report.lua
var reportSrc string

var reportScript = redis.NewScript(reportSrc)

// Key is the Redis hash of an item's reports (its hash tag is the item's).
func Key(item string) string { return "wr:{" + item + "}:signal" }

// ErrTooManyInstances: the item already has MaxInstances reporting (429).
var ErrTooManyInstances = errors.New("too many instances report this item's signal")

// keep is how long an item's reports outlive its last report.
const keep = 10 * time.Minute

// Store keeps the latest report of each instance of an item's site.
type Store struct {
	rdb redis.UniversalClient
}

// NewStore returns a store on rdb.
func NewStore(rdb redis.UniversalClient) *Store { return &Store{rdb: rdb} }

// Put keeps r (already validated, At set) as its instance's latest.
func (s *Store) Put(ctx context.Context, item string, r *Report) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode the signal of %s: %w", item, err)
	}
	n, err := reportScript.Run(ctx, s.rdb, []string{Key(item)}, r.Instance, b, MaxInstances, int(keep.Seconds())).Int()
	if err != nil {
		return fmt.Errorf("keep the signal of %s: %w", item, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", item, ErrTooManyInstances)
	}
	return nil
}

// Read returns the latest report of each instance of item's site; reports
// older than keep are dropped from Redis on the way.
func (s *Store) Read(ctx context.Context, item string, now time.Time) ([]Report, error) {
	m, err := s.rdb.HGetAll(ctx, Key(item)).Result()
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("read the signal of %s: %w", item, err)
	}
	var out []Report
	var stale []string
	for inst, v := range m {
		var r Report
		if json.Unmarshal([]byte(v), &r) != nil || now.Sub(time.UnixMilli(r.At)) > keep {
			stale = append(stale, inst)
			continue
		}
		out = append(out, r)
	}
	if len(stale) > 0 {
		if err := s.rdb.HDel(ctx, Key(item), stale...).Err(); err != nil {
			return out, fmt.Errorf("drop %d stale signals of %s: %w", len(stale), item, err)
		}
	}
	return out, nil
}

// Follower turns the instances' reports, read again and again, into the
// signal the controller steps on: each new window of each instance counts
// once (merged by bucket), and the active sessions are the sum of every
// instance's latest within maxAge.
type Follower struct {
	maxAge time.Duration
	seen   map[string]int64 // instance -> At of its last report counted
	last   *steer.Signal
}

// NewFollower returns a follower that forgets instances silent for maxAge.
func NewFollower(maxAge time.Duration) *Follower {
	return &Follower{maxAge: maxAge, seen: map[string]int64{}}
}

// Next is the signal after reading reports at now: the merge of the
// windows not counted before (At: the newest), or the previous signal when
// nothing is new; nil before any report.
func (f *Follower) Next(reports []Report, now time.Time) *steer.Signal {
	var merged *steer.Signal
	var active int64
	for i := range reports {
		r := &reports[i]
		if now.Sub(time.UnixMilli(r.At)) > f.maxAge {
			continue
		}
		active += r.Active
		if r.At <= f.seen[r.Instance] {
			continue
		}
		f.seen[r.Instance] = r.At
		sig := r.Signal()
		if merged == nil {
			merged = &sig
		} else {
			m := steer.Merge(*merged, sig)
			merged = &m
		}
	}
	if merged == nil {
		return f.last
	}
	merged.Active = active
	f.last = merged
	return merged
}
