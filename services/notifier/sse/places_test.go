package sse

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// pipelines counts the pipelines (MULTI round trips) a client sends.
type pipelines struct{ n atomic.Int64 }

func (*pipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// Streams of one item reading their places at once get what Place answers
// each, in fewer round trips than reads.
func TestPlaceReadsMergeAnItemsReads(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	_, err := l.ApplyItem(ctx, topics.ItemState{ItemID: "pr", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 10, SessionTTLSeconds: 60}})
	require.NoError(t, err)
	const n = 300
	ops := make([]queue.Op, n)
	toks := make([]string, n+20)
	for i := range toks {
		toks[i] = fmt.Sprintf("t%04d", i) // the last 20 never registered
		if i < n {
			ops[i] = queue.Op{Kind: queue.OpRegister, ItemID: "pr", TokenID: toks[i], UserID: fmt.Sprintf("u%d", i), Offset: int64(i)}
		}
	}
	_, err = l.Apply(ctx, ops)
	require.NoError(t, err)
	_, err = l.Promote(ctx, "pr", 1, time.Now(), time.Second) // t0000..t0009 admitted
	require.NoError(t, err)

	h := &pipelines{}
	rdb.AddHook(h)
	r := newPlaceReads(l, 2*time.Second)
	type got struct {
		p       line.Place
		waiting bool
		err     error
	}
	res := make([]got, len(toks))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, tok := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res[i].p, res[i].waiting, res[i].err = r.Place(ctx, "pr", tok)
		}()
	}
	close(start)
	wg.Wait()
	trips := h.n.Load()
	assert.Less(t, trips, int64(len(toks))/2, "reads due together share round trips")
	assert.Empty(t, r.tail, "no batch left behind")

	waiting := 0
	for i, tok := range toks {
		require.NoError(t, res[i].err, tok)
		p, w, err := l.Place(ctx, "pr", tok)
		require.NoError(t, err)
		assert.Equal(t, w, res[i].waiting, tok)
		assert.Equal(t, p, res[i].p, tok)
		if w {
			waiting++
		}
	}
	assert.Equal(t, n-10, waiting)
	t.Logf("%d reads in %d round trips", len(toks), trips)
}
