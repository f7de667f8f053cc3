package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// TestRebuildRestoresALine: a line on Kafka, an empty Redis; `waitroomctl
// rebuild` puts everyone back in order and marks the view ready.
func TestRebuildRestoresALine(t *testing.T) {
	ctx := context.Background()
	seeds := testenv.Kafka(t, 3)
	srv := testenv.StartRedis(t)
	rdb := srv.Client()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	item := topics.ItemState{V: 1, ItemID: "shoe", Name: "Shoe", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 1, SessionTTLSeconds: 60}}
	recs := []*kgo.Record{{Topic: topics.Items, Key: []byte("shoe"), Value: topics.Encode(&item)}}
	for _, u := range []string{"ann", "bob", "cid"} {
		ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, ItemID: "shoe", UserID: u, TokenID: "t-" + u, RequestedAt: time.Now().UnixMilli()}
		recs = append(recs, &kgo.Record{Topic: topics.Registrations, Key: []byte("shoe"), Value: topics.Encode(&ev)})
	}
	for _, r := range recs {
		require.NoError(t, cl.ProduceSync(ctx, r).FirstErr())
	}

	code, out, stderr := run(t, "rebuild", "--brokers", strings.Join(seeds, ","), "--redis", srv.Addr, "--settle", "1ms")
	require.Equal(t, ExitOK, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	require.Contains(t, out, "view rebuilt")
	ids, err := queue.New(rdb).Waiting(ctx, "shoe", 0)
	require.NoError(t, err)
	require.Equal(t, []string{"t-ann", "t-bob", "t-cid"}, ids)
	m, ok, err := view.Read(ctx, rdb)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, view.Ready, m.State)
}
