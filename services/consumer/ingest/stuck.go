package ingest

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"go.uber.org/zap"
)

// stuckAfter is how long a rebuilt item may wait for the consumer of its
// partition to apply again what it passed over: the rebuild's settle
// (rebuildItems') and as much again for that consumer's next batch.
func stuckAfter(interval time.Duration) time.Duration {
	return 2 * (2*interval + 500*time.Millisecond)
}

// relostStuck marks lost again each rebuilt item of st that still waits,
// after stuckAfter, for the consumer of its partition to apply a record it
// passed over at or after the rebuild's end. That consumer does so only on
// its partition's next batch (gateItems): with nobody registering for the
// item after, the item would answer 503 forever. Rebuilt again, the item is
// read up to an end past that record, and found. It returns how many items
// it marked.
func relostStuck(ctx context.Context, rdb redis.UniversalClient, st view.Status, after time.Duration, now time.Time, log *zap.Logger) (int, error) {
	var rebuilt []string
	for it, li := range st.Lost {
		if li.State == view.ItemRebuilt && li.Rebuilt > 0 && now.Sub(time.UnixMilli(li.Rebuilt)) > after {
			rebuilt = append(rebuilt, it)
		}
	}
	if len(rebuilt) == 0 {
		return 0, nil
	}
	lost, skipped, err := view.Lost(ctx, rdb, rebuilt...) // afresh: the consumer may have finished meanwhile
	if err != nil {
		return 0, err
	}
	n := 0
	for _, it := range rebuilt {
		li, ok := lost[it]
		sk, hasSkip := skipped[it]
		if !ok || li.State != view.ItemRebuilt || !hasSkip {
			continue
		}
		end, known := li.Ends[strconv.Itoa(int(sk.Partition))]
		if known && sk.Offset < end {
			continue // nothing passed over after the end: the rebuild finds it
		}
		reason := "a record passed over after its rebuild's end was not applied again: the item is rebuilt again"
		if err := view.SetLost(ctx, rdb, it, view.LostItem{Since: li.Since, State: view.ItemLost, Reason: reason}); err != nil {
			return n, err
		}
		log.Warn("rebuilt item stuck: rebuilding it again", zap.String("item", it), zap.Int32("partition", sk.Partition),
			zap.Int64("skipped", sk.Offset), zap.Int64("end", end))
		n++
	}
	return n, nil
}
