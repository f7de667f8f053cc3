package promote

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// EpochFloorKey keeps, beside the view's marker (another slot, so in Redis
// Cluster most often another master than EpochKey's), the highest epoch
// taken. A master holding EpochKey restarted empty would hand out 1, 2...
// again: the next leader takes its epoch above this floor instead, so the
// fence never goes backwards. Both lost at once means the marker is lost
// too, and the rebuild raises EpochKey above every epoch claimed on
// waitroom.admissions.
const EpochFloorKey = "wr:{view}:epoch-floor"

var (
	// nextEpoch increments the counter, above ARGV[1] (the floor) when it
	// came back lower.
	nextEpoch = redis.NewScript(`local e = redis.call('INCR', KEYS[1])
local floor = tonumber(ARGV[1])
if e <= floor then
  e = floor + 1
  redis.call('SET', KEYS[1], e)
end
return e`)
	// raiseFloor sets the floor to at least ARGV[1].
	raiseFloor = redis.NewScript(`local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if cur < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return 1`)
)

// epochs hands out fencing epochs that never go backwards, even when the
// counter's master restarts empty: above the floor in Redis and above any
// epoch this process took.
type epochs struct {
	rdb  redis.UniversalClient
	last atomic.Int64
}

// next takes a new epoch and records it as the floor.
func (e *epochs) next(ctx context.Context) (int64, error) {
	floor, err := e.rdb.Get(ctx, EpochFloorKey).Int64()
	if err != nil && err != redis.Nil {
		return 0, fmt.Errorf("read the epoch floor: %w", err)
	}
	floor = max(floor, e.last.Load())
	n, err := nextEpoch.Run(ctx, e.rdb, []string{EpochKey}, strconv.FormatInt(floor, 10)).Int64()
	if err != nil {
		return 0, fmt.Errorf("take an epoch: %w", err)
	}
	if err := raiseFloor.Run(ctx, e.rdb, []string{EpochFloorKey}, strconv.FormatInt(n, 10)).Err(); err != nil {
		return 0, fmt.Errorf("raise the epoch floor to %d: %w", n, err)
	}
	for {
		cur := e.last.Load()
		if n <= cur || e.last.CompareAndSwap(cur, n) {
			return n, nil
		}
	}
}
