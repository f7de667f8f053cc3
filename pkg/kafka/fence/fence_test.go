package fence_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/fence"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"github.com/waitroom/waitroom/topics"
)

// committed reads topics.Admissions read_committed to its last stable
// offset and returns the values.
func committed(t *testing.T, ctx context.Context, brokers []string) []string {
	t.Helper()
	var out []string
	require.NoError(t, kclient.ReadToEnd(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, topics.Admissions, func(r *kgo.Record) error {
		out = append(out, string(r.Value))
		return nil
	}))
	return out
}

func rec(v string) *kgo.Record {
	return &kgo.Record{Topic: topics.Admissions, Key: []byte("k"), Value: []byte(v)}
}

// Fencing an id aborts its open transaction (nothing of it is read
// committed, and its end is reached past the abort marker) and refuses its
// producer from then on; the Producer that failed makes a new client on
// Ready and writes again.
func TestFenceAbortsTheOpenTransactionAndRefusesItsProducer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	brokers := testenv.Kafka(t, 1)
	base := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	p := fence.NewProducer(fence.ID("t", 3), base...)
	defer p.Close()
	require.Error(t, p.ProduceSync(ctx, rec("unready")).FirstErr(), "not ready: nothing sent")
	require.NoError(t, p.Ready(ctx))
	require.NoError(t, p.ProduceSync(ctx, rec("first")).FirstErr())
	require.Equal(t, []string{"first"}, committed(t, ctx, brokers))

	// A leader's transaction left open (paused before its commit).
	zombie, err := kgo.NewClient(append(base, kgo.TransactionalID(fence.ID("t", 3)), kgo.TransactionTimeout(fence.Timeout))...)
	require.NoError(t, err)
	defer zombie.Close()
	require.NoError(t, zombie.BeginTransaction())
	require.NoError(t, zombie.ProduceSync(ctx, rec("open")).FirstErr())

	adm, err := kgo.NewClient(base...)
	require.NoError(t, err)
	defer adm.Close()
	require.NoError(t, fence.Fence(ctx, adm, fence.IDs("t")...))
	require.Equal(t, []string{"first"}, committed(t, ctx, brokers), "the open transaction aborted")
	require.Error(t, zombie.EndTransaction(ctx, kgo.TryCommit), "the zombie cannot commit")
	require.Error(t, p.ProduceSync(ctx, rec("late")).FirstErr(), "the earlier holder is refused")
	require.Equal(t, []string{"first"}, committed(t, ctx, brokers), "nothing late on the record")

	require.NoError(t, p.Ready(ctx), "a new client takes the id again")
	require.NoError(t, p.ProduceSync(ctx, rec("again")).FirstErr())
	require.Equal(t, []string{"first", "again"}, committed(t, ctx, brokers))
}
