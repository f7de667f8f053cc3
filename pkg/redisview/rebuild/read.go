package rebuild

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
)

// bounds are, per partition, the offsets to read: [start, end).
type bounds map[int32][2]int64

// count is how many records b spans.
func (b bounds) count() int64 {
	var n int64
	for _, se := range b {
		n += max(se[1]-se[0], 0)
	}
	return n
}

// offsets lists the start and end offsets of topic now (kclient.Spans, as
// bounds).
func offsets(ctx context.Context, adm *kadm.Client, topic string) (bounds, error) {
	spans, err := kclient.Spans(ctx, adm, topic)
	if err != nil {
		return nil, err
	}
	if len(spans) == 0 {
		return nil, fmt.Errorf("topic %s has no partitions (does it exist?)", topic)
	}
	b := bounds{}
	for p, sp := range spans {
		b[p] = [2]int64{sp.From, sp.To}
	}
	return b, nil
}

// committedReader reads topic's partitions from want, read committed
// (nothing of an aborted or open transaction), keeping the control records:
// a transaction marker may be the last offset before the end, and the
// partition is done when it is reached (they are not handed on).
func committedReader(base []kgo.Opt, topic string, want map[int32]kgo.Offset) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, base...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(16<<20),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client to read %s: %w", topic, err)
	}
	return cl, nil
}

// read hands every record of topic within b to fn, each partition in offset
// order (partitions interleaved), with a client of its own built from base.
// prep (may be nil) runs first over each fetch's records on every core (the
// decoding); fn gets its result, in order.
func read(ctx context.Context, base []kgo.Opt, topic string, b bounds, prep func(*kgo.Record) any, fn func(*kgo.Record, any) error) (int64, error) {
	want := map[int32]kgo.Offset{}
	left := 0
	for p, se := range b {
		if se[1] > se[0] {
			want[p] = kgo.NewOffset().At(se[0])
			left++
		}
	}
	if left == 0 {
		return 0, nil
	}
	cl, err := committedReader(base, topic, want)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	done := map[int32]bool{}
	var n int64
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("fetch %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return n, ferr
		}
		recs := make([]*kgo.Record, 0, fs.NumRecords())
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			end := b[fp.Partition][1]
			for _, r := range fp.Records {
				if done[fp.Partition] || r.Offset >= end {
					break
				}
				if !r.Attrs.IsControl() {
					recs = append(recs, r)
				}
				if r.Offset == end-1 {
					done[fp.Partition] = true
					left--
				}
			}
		})
		prepped := make([]any, len(recs))
		if prep != nil {
			workers := runtime.GOMAXPROCS(0)
			var wg sync.WaitGroup
			per := (len(recs) + workers - 1) / workers
			for lo := 0; lo < len(recs); lo += per {
				hi := min(lo+per, len(recs))
				wg.Go(func() {
					for i := lo; i < hi; i++ {
						prepped[i] = prep(recs[i])
					}
				})
			}
			wg.Wait()
		}
		for i, r := range recs {
			if ferr = fn(r, prepped[i]); ferr != nil {
				break
			}
			n++
		}
		if ferr != nil {
			return n, ferr
		}
	}
	return n, nil
}
