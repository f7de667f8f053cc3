package sse

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// BadRecordFunc is told about every admissions record that cannot be decoded,
// after it was counted and logged: the hook a dead-letter writer plugs into.
type BadRecordFunc func(ctx context.Context, r *kgo.Record, err error)

// FollowOpts are the kgo options of the admissions client: every partition,
// no consumer group (every replica reads everything), starting at the end of
// the topic as of start. The end is pinned by time rather than "latest when
// the offsets are looked up", so an event published between start and that
// look-up is not missed; margin covers clock skew with the scheduler (events
// are idempotent, so reading a few again costs nothing). It reads committed:
// admissions of a transaction the broker aborted (a fenced leader's) are
// never told.
func FollowOpts(start time.Time, margin time.Duration) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumeTopics(topics.Admissions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AfterMilli(start.Add(-margin).UnixMilli())),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	}
}

// Follow reads admission events with cl (built with FollowOpts) and hands
// each to hub until ctx ends. A record that cannot be decoded, or whose key is
// not its item, is counted, logged and passed to bad (may be nil); it never
// stops the loop. The caller closes cl.
func Follow(ctx context.Context, cl *kgo.Client, hub *Hub, m *Metrics, bad BadRecordFunc, log *zap.Logger) {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			log.Warn("admissions fetch", zap.String("topic", t), zap.Int32("partition", p), zap.Error(err))
		})
		fs.EachRecord(func(r *kgo.Record) {
			m.records.Inc()
			ev, err := topics.DecodeAdmission(r.Value)
			if err == nil && ev.ItemID != string(r.Key) {
				err = fmt.Errorf("%w: key %q differs from itemId %q", topics.ErrInvalid, r.Key, ev.ItemID)
			}
			if err != nil {
				m.badRecords.Inc()
				log.Warn("skip an undecodable admission event", zap.Int32("partition", r.Partition), zap.Int64("offset", r.Offset), zap.Error(err))
				if bad != nil {
					bad(ctx, r, err)
				}
				return
			}
			if ev.Kind == topics.KindSteer {
				return // a controller's decision moves nobody in the line
			}
			if ev.At > 0 {
				m.lag.Observe(max(0, float64(time.Now().UnixMilli()-ev.At)/1000))
			}
			hub.Admission(ev)
		})
	}
}
