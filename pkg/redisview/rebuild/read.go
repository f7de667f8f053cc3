package rebuild

import (
	"context"
	"fmt"
	"runtime"

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

// part is a run of one fetch's records on its way to fn, with what prep
// made of each (filled on a worker, then done is closed).
type part struct {
	recs    []*kgo.Record
	prepped []any
	done    chan struct{}
}

// partLen is how many records a part holds, and readAhead how many parts
// the fetching may run ahead of fn: fn starts on a fetch as soon as its
// first part is decoded, and the fetching and decoding of the next ones go
// on meanwhile (on a core the applying leaves), instead of a whole fetch
// (up to FetchMaxPartitionBytes, some 100,000 records) being decoded while
// the applying runs dry, then applied while nothing is decoded.
const (
	partLen   = 4096
	readAhead = 16
)

// read hands every record of topic within b to fn, each partition in offset
// order (partitions interleaved), with a client of its own built from base.
// prep (may be nil) runs first over each record on worker goroutines (the
// decoding), as many as GOMAXPROCS, ahead of fn; fn gets its result, in
// order, on the caller's goroutine.
func read(ctx context.Context, base []kgo.Opt, topic string, b bounds, prep func(*kgo.Record) any, fn func(*kgo.Record, any) error) (int64, error) {
	want := map[int32]kgo.Offset{}
	for p, se := range b {
		if se[1] > se[0] {
			want[p] = kgo.NewOffset().At(se[0])
		}
	}
	if len(want) == 0 {
		return 0, nil
	}
	cl, err := committedReader(base, topic, want)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	fctx, cancel := context.WithCancel(ctx)
	parts := make(chan *part, readAhead)
	ferr := make(chan error, 1)
	go func() { ferr <- fetch(fctx, cl, topic, b, len(want), prep, parts) }()
	var n int64
	err = func() error {
		for p := range parts {
			<-p.done
			for i, r := range p.recs {
				if err := fn(r, p.prepped[i]); err != nil {
					return err
				}
				n++
			}
		}
		return nil
	}()
	cancel() // after fn failed, the fetching stops; wait for it before closing the client
	if fe := <-ferr; err == nil && fe != nil {
		err = fe
	}
	return n, err
}

// fetch polls cl for topic's records within b (left partitions to read to
// their end) and sends them to out in parts, in order, each part's prep
// started on a worker; it closes out when done.
func fetch(ctx context.Context, cl *kgo.Client, topic string, b bounds, left int, prep func(*kgo.Record) any, out chan<- *part) error {
	defer close(out)
	workers := make(chan struct{}, runtime.GOMAXPROCS(0))
	send := func(p *part) error {
		select {
		case out <- p:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("read %s: %w", topic, ctx.Err())
		}
	}
	done := map[int32]bool{}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("fetch %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
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
		for lo := 0; lo < len(recs); lo += partLen {
			p := &part{recs: recs[lo:min(lo+partLen, len(recs))], done: make(chan struct{})}
			p.prepped = make([]any, len(p.recs))
			if prep == nil {
				close(p.done)
			} else {
				workers <- struct{}{}
				go func() {
					defer close(p.done)
					for i, r := range p.recs {
						p.prepped[i] = prep(r)
					}
					<-workers
				}()
			}
			if err := send(p); err != nil {
				return err
			}
		}
	}
	return nil
}
