package ingest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// stopWrites makes Redis refuse every write with MISCONF, as when it cannot
// persist its snapshot (a full or lost disk): its directory goes and a
// BGSAVE fails. The returned func lets writes through again.
func stopWrites(t *testing.T, s *testenv.RedisServer) func() {
	t.Helper()
	ctx := context.Background()
	c := s.Client()
	dir, err := c.ConfigGet(ctx, "dir").Result()
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(dir["dir"]))
	require.NoError(t, c.ConfigSet(ctx, "save", "3600 1").Err())
	require.NoError(t, c.BgSave(ctx).Err())
	require.Eventually(t, func() bool {
		return c.Set(ctx, "probe", "1", 0).Err() != nil
	}, 5*time.Second, 20*time.Millisecond, "writes refused once the BGSAVE failed")
	require.ErrorContains(t, c.Set(ctx, "probe", "1", 0).Err(), "MISCONF")
	return func() { require.NoError(t, c.ConfigSet(ctx, "save", "").Err()) }
}

// A Redis that refuses writes with MISCONF (it cannot persist: a full disk)
// is trouble with Redis, not with the records: the batch fails and comes
// again, and nothing is dead-lettered, registrations or item states; once
// Redis takes writes again they are applied.
func TestMisconfRedisDeadLettersNothing(t *testing.T) {
	s := testenv.StartRedis(t)
	rdb := s.Client()
	ctx := context.Background()
	box := &letterBox{}
	m := ingest.NewMetrics(prometheus.NewRegistry())
	retry := ingest.Retry{Attempts: 2, Backoff: time.Millisecond}
	regs := ingest.NewRegistrations(rdb, knownItems{"tix": true, "warm": true}, box, m, zaptest.NewLogger(t), retry)
	items := ingest.NewItemStates(queue.New(rdb), box, m, zaptest.NewLogger(t), retry)
	recs := regRecords("tix", "a", "b")
	st := topics.ItemState{V: 1, ItemID: "tix", Name: "tix", Stock: topics.Unlimited, Enabled: true, Version: 1, UpdatedAt: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 1, SessionTTLSeconds: 60}}
	item := []*kgo.Record{{Topic: topics.Items, Key: []byte("tix"), Value: topics.Encode(&st)}}

	// The scripts are cached, as in a consumer that has been running: a
	// batch of one item goes as a plain pipeline, without MULTI.
	require.NoError(t, regs.Handle(ctx, 1, regRecords("warm", "w")))
	resume := stopWrites(t, s)
	assert.Error(t, regs.Handle(ctx, 0, recs), "a batch Redis cannot write is not done")
	assert.Error(t, items.Handle(ctx, 0, item), "an item state Redis cannot write is not done")
	assert.Empty(t, box.all(), "nothing dead-lettered for Redis's own trouble")

	resume()
	require.NoError(t, regs.Handle(ctx, 0, recs))
	require.NoError(t, items.Handle(ctx, 0, item))
	assert.Empty(t, box.all())
	line, err := queue.New(rdb).Waiting(ctx, "tix", 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"tok-a", "tok-b"}, line)
}
