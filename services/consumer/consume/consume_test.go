package consume_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/services/consumer/consume"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// A handler that returns a Rewind has its partition consumed again from the
// offset asked, and the batch that asked is not committed.
func TestRewindConsumesThePartitionAgain(t *testing.T) {
	seeds := testenv.Kafka(t, 1)
	ctx := context.Background()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topics.Registrations))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for range 10 {
		if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, consume.GroupOpts("g", topics.Registrations)...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var mu sync.Mutex
	var applied []int64
	rewound := false
	h := func(_ context.Context, p int32, recs []*kgo.Record) error {
		mu.Lock()
		defer mu.Unlock()
		if !rewound && recs[len(recs)-1].Offset >= 6 {
			rewound = true
			return &consume.Rewind{Partition: p, Offset: 3}
		}
		for _, r := range recs {
			applied = append(applied, r.Offset)
		}
		return nil
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- consume.Run(rctx, cl, h, zaptest.NewLogger(t), consume.Options{MaxPollRecords: 4}) }()
	adm := kadm.NewClient(prod)
	deadline := time.Now().Add(30 * time.Second)
	for {
		offs, err := adm.FetchOffsetsForTopics(ctx, "g", topics.Registrations)
		if err == nil {
			if o, ok := offs.Lookup(topics.Registrations, 0); ok && o.At == 10 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the group never committed offset 10")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !rewound {
		t.Fatal("no batch asked for a rewind: the test proves nothing")
	}
	// Every offset from 3 on was applied after the rewind, in order, and
	// nothing before 3 twice.
	seen := map[int64]int{}
	last := int64(-1)
	for _, o := range applied {
		seen[o]++
		if o == 3 && last >= 3 {
			last = 2 // the replay starts again at 3
		}
		if o != last+1 && o != 3 {
			t.Fatalf("offsets out of order: %v", applied)
		}
		last = o
	}
	for o := int64(0); o < 10; o++ {
		if seen[o] == 0 {
			t.Fatalf("offset %d never applied: %v", o, applied)
		}
		if o < 3 && seen[o] != 1 {
			t.Fatalf("offset %d applied %d times: %v", o, seen[o], applied)
		}
	}
	if applied[len(applied)-1] != 9 {
		t.Fatalf("the last applied is %d: %v", applied[len(applied)-1], applied)
	}
}
