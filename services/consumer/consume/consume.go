// Package consume runs a consumer-group loop the way every waitroom consumer
// needs it: each partition's records handled in order as one batch, partitions
// in parallel, a failed batch retried with back-off (never skipped), and
// offsets committed only after every batch of a poll succeeded.
package consume

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/retry"
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
		var rwMu sync.Mutex
		rewinds := map[string]map[int32]kgo.EpochOffset{}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			wg.Go(func() {
				if err := retryBatch(ctx, p.Partition, p.Records, h, o, log); err != nil {
					var rw *Rewind
					if errors.As(err, &rw) {
						rwMu.Lock()
						if rewinds[p.Topic] == nil {
							rewinds[p.Topic] = map[int32]kgo.EpochOffset{}
						}
						rewinds[p.Topic][p.Partition] = kgo.EpochOffset{Epoch: -1, Offset: rw.Offset}
						rwMu.Unlock()
						return
					}
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
		if len(rewinds) > 0 {
			// Before the commit, while no rebalance can revoke the partitions:
			// the batch asking for it is not committed, and its partition is
			// consumed again from the offset asked.
			cl.SetOffsets(rewinds)
			for t, ps := range rewinds {
				for part, eo := range ps {
					log.Info("partition rewound", zap.String("topic", t), zap.Int32("partition", part), zap.Int64("offset", eo.Offset))
				}
			}
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			// Not fatal: the records are applied idempotently and come again.
			log.Warn("commit offsets", zap.Error(err))
		}
		cl.AllowRebalance()
	}
}

// Rewind is the error a BatchHandler returns to have its partition consumed
// again from Offset (a record it cannot apply yet was passed over earlier):
// the batch is not committed, and the next poll starts at Offset.
type Rewind struct {
	Partition int32
	Offset    int64
}

func (r *Rewind) Error() string {
	return fmt.Sprintf("consume partition %d again from offset %d", r.Partition, r.Offset)
}

func retryBatch(ctx context.Context, part int32, recs []*kgo.Record, h BatchHandler, o Options, log *zap.Logger) error {
	err := retry.Do(ctx, retry.Policy{Initial: o.MinBackoff, Max: o.MaxBackoff},
		func(ctx context.Context) error {
			err := h(ctx, part, recs)
			if rw := (*Rewind)(nil); errors.As(err, &rw) {
				return retry.Permanent(err)
			}
			return err
		},
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
