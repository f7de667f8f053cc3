package rebuild

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/topics"
)

// TestReadReturnsWhenFnFails: when fn fails, read returns its error at once,
// though the fetching ahead of it has more parts than it may hold waiting (it
// is stopped, not left blocked on a full channel).
func TestReadReturnsWhenFnFails(t *testing.T) {
	ctx := context.Background()
	seeds := testenv.Kafka(t, 1)
	kc, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topics.Registrations))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	total := (readAhead + 4) * partLen // more than the parts read may hold ahead
	for i := range total {
		kc.Produce(ctx, &kgo.Record{Key: []byte("i"), Value: []byte(strconv.Itoa(i))}, nil)
	}
	if err := kc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	b := bounds{0: {0, int64(total)}}
	stop := errors.New("stop")
	prepped := 0
	type result struct {
		n   int64
		err error
	}
	got := make(chan result, 1)
	go func() {
		n, err := read(ctx, []kgo.Opt{kgo.SeedBrokers(seeds...)}, topics.Registrations, b,
			func(r *kgo.Record) any { return string(r.Value) },
			func(r *kgo.Record, v any) error {
				if v.(string) != strconv.FormatInt(r.Offset, 10) {
					return errors.New("prep's result is not its record's")
				}
				if prepped++; prepped == partLen+1 { // into the second part: the fetching is ahead
					time.Sleep(100 * time.Millisecond)
					return stop
				}
				return nil
			})
		got <- result{n, err}
	}()
	select {
	case r := <-got:
		if !errors.Is(r.err, stop) || r.n != partLen {
			t.Fatalf("read = %d, %v; want %d, %v", r.n, r.err, partLen, stop)
		}
	case <-time.After(time.Minute):
		t.Fatal("read did not return after fn failed")
	}
}
