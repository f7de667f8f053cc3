package promote

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// A tick that admits 100,000 at once: everyone admitted in that one tick,
// published on waitroom.admissions exactly as admitted, in order, in events
// under the broker's message size, and the rate budget charged for all.
func TestTickAdmitting100000(t *testing.T) {
	w := newWorld(t)
	const n = 100_000
	want := w.fill("huge", n, topics.AdmissionPolicy{RatePerSecond: n, SessionTTLSeconds: 600})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	at := time.Now()
	s := w.replica(Options{Tick: 50 * time.Millisecond, Clock: func() time.Time { return at }}) // time stands still: one tick's budget
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	evs := w.admissions("huge", n, 60*time.Second)
	cancel()
	<-done

	var raw []string
	for _, e := range evs {
		raw = append(raw, e.Admitted...)
		assert.Equal(t, at.UnixMilli(), e.At, "all in one tick")
		assert.LessOrEqual(t, len(topics.Encode(&e)), topics.MaxAdmissionEventBytes)
	}
	assert.Equal(t, want, raw, "every admission once, in line order")
	assert.Greater(t, len(evs), 3, "split into events under the message size")
	st, err := w.line.Stats(context.Background(), "huge")
	require.NoError(t, err)
	assert.Equal(t, int64(n), st.Head)
	assert.Equal(t, int64(n), st.Admitted)
	assert.Equal(t, int64(n), st.AdmittedLastMinute, "the pace is charged for everyone")
	left, err := w.line.Unpublished(context.Background(), "huge", 10)
	require.NoError(t, err)
	assert.Empty(t, left, "all acknowledged")
}

// failingProducer fails the records whose index (over every call) is in fail.
type failingProducer struct {
	Producer
	mu   sync.Mutex
	seen int
	fail map[int]bool
}

func (p *failingProducer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	p.mu.Lock()
	var ok []*kgo.Record
	var out kgo.ProduceResults
	for _, r := range rs {
		if p.fail[p.seen] {
			out = append(out, kgo.ProduceResult{Record: r, Err: errors.New("broker says no")})
		} else {
			ok = append(ok, r)
		}
		p.seen++
	}
	p.mu.Unlock()
	return append(p.Producer.ProduceSync(ctx, ok...), out...)
}

// An item's events are acknowledged in order up to the first that failed:
// what follows it goes out again with the next tick, and the topic holds
// every admission, in order, the failed part after a copy of what followed it.
func TestPublishAcksUpToFirstFailure(t *testing.T) {
	w := newWorld(t)
	const n = 3_000
	want := w.fill("part", n, topics.AdmissionPolicy{RatePerSecond: n, SessionTTLSeconds: 600})
	prod := &failingProducer{Producer: w.prod, fail: map[int]bool{1: true}} // the second event of the first round
	s := New(w.rdb, prod, Options{MaxEventBytes: 10_000}, prometheus.NewRegistry(), zaptest.NewLogger(t))
	ctx := context.Background()
	at := time.Now()
	tk, err := w.line.Promote(ctx, "part", 1, at, time.Second)
	require.NoError(t, err)
	require.Equal(t, n, tk.Admitted)
	exps := make([]int64, n) // events carry each admission's expiry
	for i := range exps {
		exps[i] = at.UnixMilli() + 600_000
	}
	parts := topics.SplitAdmission(topics.AdmissionEvent{ItemID: "part", Admitted: tk.Unpublished, ExpiresAt: exps, Head: tk.Head,
		Waiting: tk.Waiting, Active: tk.Active, Epoch: 1, At: at.UnixMilli(), V: topics.Version, Applied: tk.Admits[0].Applied}, 10_000)
	require.Greater(t, len(parts), 2)

	s.publish(ctx, s.prod, 1, at, []dueItem{{item: "part", tk: tk}})
	left, err := w.line.Unpublished(ctx, "part", n)
	require.NoError(t, err)
	assert.Equal(t, want[len(parts[0].Admitted):], left, "acknowledged up to the failed event only")

	// The next tick publishes the rest.
	tk, err = w.line.Promote(ctx, "part", 1, at, time.Second)
	require.NoError(t, err)
	s.publish(ctx, s.prod, 1, at, []dueItem{{item: "part", tk: tk}})
	left, err = w.line.Unpublished(ctx, "part", n)
	require.NoError(t, err)
	assert.Empty(t, left)
	evs := w.admissions("part", n, 30*time.Second)
	assert.Equal(t, want, flatten(evs), "every admission on the topic, in order once duplicates are dropped")
}
