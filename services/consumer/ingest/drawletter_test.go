package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// A draw Redis keeps refusing (a corrupt seq) is dead-lettered even when the
// first write of its letter fails: the batch comes again and the draw, not
// applied, is still dead-lettered, never passed over as a REPLAY of its own
// mark.
func TestRefusedDrawNotLostWhenDLQWriteFails(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	const window = int64(1_700_000_000_000)
	root := draw.Root([]byte("key"), "sale", "salt")
	commit := draw.Commit(root, 4)
	seed, err := draw.Seed(root, 4, 1)
	require.NoError(t, err)
	recs := regRecords("sale", "a", "b")
	for _, r := range recs {
		ev, err := topics.DecodeRegistration(r.Value)
		require.NoError(t, err)
		ev.Window = window
		r.Value = topics.Encode(&ev)
	}
	d := drawRecord("sale", window, 1, seed, commit)
	d.Offset = int64(len(recs))
	recs = append(recs, d)
	box := &letterBox{failures: 1}
	h := ingest.NewRegistrations(rdb, knownItems{"sale": true}, box, ingest.NewMetrics(prometheus.NewRegistry()), zaptest.NewLogger(t),
		ingest.Retry{Attempts: 1, Backoff: time.Millisecond})
	require.NoError(t, h.Handle(ctx, 0, recs[:2])) // pooled
	require.NoError(t, rdb.Set(ctx, queue.KeysFor("sale").Seq, "corrupt", 0).Err())
	require.Error(t, h.Handle(ctx, 0, recs), "the letter could not be written: the batch is not done")
	require.NoError(t, h.Handle(ctx, 0, recs))
	letters := box.all()
	require.Len(t, letters, 1, "the refused draw is dead-lettered")
	assert.Equal(t, d.Offset, letters[0].Record.Offset)
	assert.Equal(t, topics.ErrorTypeProcessing, dlq.ErrorType(letters[0].Err))
}
