package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// TestBypassAudit: `bypass audit` lists the item's registrations that
// carried a code, from the record, and what the line made of each (read from
// the view the line's scripts wrote: a use past the count, or by a user who
// already held a place, was never placed).
func TestBypassAudit(t *testing.T) {
	ctx := context.Background()
	seeds := testenv.Kafka(t, 3)
	srv := testenv.StartRedis(t)
	l := queue.New(srv.Client())
	_, err := l.ApplyItem(ctx, topics.ItemState{ItemID: "gala", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 0, SessionTTLSeconds: 60}})
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	exp := time.Now().Add(time.Hour).UnixMilli()
	for i, u := range []string{"ann", "bob", "cid", "dan"} {
		ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, ItemID: "gala", UserID: u, TokenID: "t-" + u,
			RequestedAt: time.Now().UnixMilli(), Client: &topics.ClientMeta{IP: "192.0.2.1"}}
		if i < 3 {
			ev.Bypass = &topics.BypassUse{Code: "bk1", Count: 2, ExpiresAt: exp}
		}
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.Registrations, Key: []byte("gala"), Value: topics.Encode(&ev)}).First()
		require.NoError(t, err)
		_, err = l.Apply(ctx, []queue.Op{queue.OpOf(&ev, r.Partition, r.Offset, r.Timestamp.UnixMilli())})
		require.NoError(t, err)
	}
	other := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, ItemID: "other", UserID: "eve", TokenID: "t-eve", RequestedAt: 1,
		Bypass: &topics.BypassUse{Code: "bk2", Count: 2, ExpiresAt: exp}}
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topics.Registrations, Key: []byte("other"), Value: topics.Encode(&other)}).FirstErr())

	code, out, stderr := run(t, "bypass", "audit", "--item", "gala", "--brokers", strings.Join(seeds, ","), "--redis", srv.Addr, "-o", "json")
	require.Equal(t, ExitOK, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	var uses []bypassUse
	require.NoError(t, json.Unmarshal([]byte(out), &uses), out)
	require.Len(t, uses, 3)
	for i, want := range []struct {
		user   string
		state  line.State
		placed bool
	}{{"ann", line.Waiting, true}, {"bob", line.Waiting, true}, {"cid", line.Rejected, false}} {
		require.Equal(t, want.user, uses[i].UserID)
		require.Equal(t, "bk1", uses[i].Code)
		require.Equal(t, string(want.state), uses[i].State, want.user)
		require.Equal(t, want.placed, uses[i].Placed, want.user)
		require.Equal(t, "192.0.2.1", uses[i].IP)
	}
	code, _, stderr = run(t, "bypass", "issue", "gala", "--count", "0")
	require.Equal(t, ExitUsage, code, stderr)
	require.Contains(t, stderr, "--count 0")
}
