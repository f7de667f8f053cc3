// Package consume runs a consumer-group loop the way every waitroom consumer
// needs it: each partition's records handled in order as one batch, partitions
// in parallel, a failed batch retried with back-off (never skipped), and
// offsets committed only after every batch of a poll succeeded.
package consume

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/retry"
	"go.uber.org/zap"
)

// BatchHandler handles one partition's records, in offset order. It must be
// idempotent: after a crash or rebalance the same records come again. An error
// makes the runner retry the same batch after a back-off.
type BatchHandler func(ctx context.Context, partition int32, recs []*kgo.Record) error

// Options of a Runner.
type Options struct {
	// MaxPollRecords bounds one poll (default 10,000).
	MaxPollRecords int
	// MinBackoff and MaxBackoff bound the wait between retries of a failed batch.
	MinBackoff, MaxBackoff time.Duration
	// OnRetry is told about every failed attempt (for metrics); may be nil.
	OnRetry func(partition int32, attempt int, err error)
	// OnLag is told each partition's lag after its batch (for metrics); may be nil.
	OnLag func(topic string, partition int32, lag int64)
}

// GroupOpts are the kgo options a Runner's client must be built with.
func GroupOpts(group string, topics ...string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(100 * time.Millisecond),
	}
}

// Run polls cl (built with GroupOpts) and hands every partition's records to h
// until ctx ends. On return nothing uncommitted was acknowledged: records whose
// batch did not finish are redelivered to the next member. The caller closes cl.
func Run(ctx context.Context, cl *kgo.Client, h BatchHandler, log *zap.Logger, o Options) error {
	if o.MaxPollRecords <= 0 {
		o.MaxPollRecords = 10_000
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 50 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	for {
		fs := cl.PollRecords(ctx, o.MaxPollRecords)
		if ctx.Err() != nil || fs.IsClientClosed() {
			cl.AllowRebalance()
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			log.Warn("fetch error", zap.String("topic", t), zap.Int32("partition", p), zap.Error(err))
		})
		var wg sync.WaitGroup
		var failed sync.Once
		var firstErr error
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			wg.Go(func() {
				if err := retryBatch(ctx, p.Partition, p.Records, h, o, log); err != nil {
					failed.Do(func() { firstErr = err })
					return
				}
				if o.OnLag != nil {
					last := p.Records[len(p.Records)-1]
					o.OnLag(p.Topic, p.Partition, max(p.HighWatermark-last.Offset-1, 0))
				}
			})
		})
		wg.Wait()
		if firstErr != nil { // only when ctx ended mid-batch: leave it uncommitted
			cl.AllowRebalance()
			return nil
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			// Not fatal: the records are applied idempotently and come again.
			log.Warn("commit offsets", zap.Error(err))
		}
		cl.AllowRebalance()
	}
}

func retryBatch(ctx context.Context, part int32, recs []*kgo.Record, h BatchHandler, o Options, log *zap.Logger) error {
	err := retry.Do(ctx, retry.Policy{Initial: o.MinBackoff, Max: o.MaxBackoff},
		func(ctx context.Context) error { return h(ctx, part, recs) },
		func(attempt int, err error, wait time.Duration) {
			if o.OnRetry != nil {
				o.OnRetry(part, attempt, err)
			}
			log.Warn("batch failed, retrying; partition paused", zap.Int32("partition", part),
				zap.Int("records", len(recs)), zap.Int("attempt", attempt), zap.Duration("backoff", wait), zap.Error(err))
		})
	if err != nil {
		return fmt.Errorf("partition %d: %w", part, err)
	}
	return nil
}
