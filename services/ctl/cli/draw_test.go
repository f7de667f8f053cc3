package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// TestDrawVerify: a pre-queue drawn on the record (the view rebuilt from it);
// `draw verify --live --order` verifies the seed and prints the placements,
// which are the live line's order. A draw whose seed is not the committed
// chain's fails verification (exit 1).
func TestDrawVerify(t *testing.T) {
	ctx := context.Background()
	seeds := testenv.Kafka(t, 3)
	srv := testenv.StartRedis(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	root := draw.Root([]byte("ctl-test-key"), "sale", "salt")
	commit := draw.Commit(root, 5)
	const opens = int64(1_800_000_000_000)
	item := topics.ItemState{V: 1, ItemID: "sale", Name: "Sale", Stock: -1, Enabled: true, Version: 1, OpensAt: opens,
		DrawCommit: commit, DrawRounds: 5, DrawSalt: "salt", Policy: topics.AdmissionPolicy{SessionTTLSeconds: 60}}
	recs := []*kgo.Record{{Topic: topics.Items, Key: []byte("sale"), Value: topics.Encode(&item)}}
	reg := func(ev topics.RegistrationEvent) {
		ev.V, ev.ItemID, ev.RequestedAt = 1, "sale", time.Now().UnixMilli()
		recs = append(recs, &kgo.Record{Topic: topics.Registrations, Key: []byte("sale"), Value: topics.Encode(&ev)})
	}
	for i := range 200 {
		u := fmt.Sprintf("u%03d", i)
		reg(topics.RegistrationEvent{Kind: topics.KindRegister, UserID: u, TokenID: "t-" + u, Window: opens})
	}
	reg(topics.RegistrationEvent{Kind: topics.KindLeave, UserID: "u005", TokenID: "t-u005"})
	seed1, _ := draw.Seed(root, 5, 1)
	reg(topics.RegistrationEvent{Kind: topics.KindDraw, Draw: &topics.Draw{Window: opens, Round: 1, Seed: seed1, Commit: commit}})
	for _, r := range recs {
		require.NoError(t, cl.ProduceSync(ctx, r).FirstErr())
	}
	brokers := strings.Join(seeds, ",")
	code, out, stderr := run(t, "rebuild", "--brokers", brokers, "--redis", srv.Addr, "--settle", "1ms")
	require.Equal(t, ExitOK, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	line, err := queue.New(srv.Client()).Waiting(ctx, "sale", 0)
	require.NoError(t, err)
	require.Len(t, line, 199)

	code, out, stderr = run(t, "draw", "verify", "--brokers", brokers, "--item", "sale", "--live", "--redis", srv.Addr, "--order")
	require.Equal(t, ExitOK, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	require.Contains(t, out, "199 waiting, in the drawn order")
	require.Contains(t, out, seed1)
	var placed []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Split(l, "\t"); len(f) == 3 && f[0] == fmt.Sprint(opens) {
			placed = append(placed, f[2])
		}
	}
	require.Equal(t, line, placed, "the printed order is the live line")

	// A second window drawn with a seed of another chain.
	recs = recs[:0]
	reg(topics.RegistrationEvent{Kind: topics.KindRegister, UserID: "late", TokenID: "t-late", Window: opens + 1000})
	other, _ := draw.Seed(draw.Root([]byte("another key"), "sale", "salt"), 5, 2)
	reg(topics.RegistrationEvent{Kind: topics.KindDraw, Draw: &topics.Draw{Window: opens + 1000, Round: 2, Seed: other, Commit: commit}})
	for _, r := range recs {
		require.NoError(t, cl.ProduceSync(ctx, r).FirstErr())
	}
	code, out, _ = run(t, "draw", "verify", "--brokers", brokers, "--item", "sale")
	require.Equal(t, ExitFailure, code, "%s", out)
	require.Contains(t, out, "NO: the seed does not hash to the commitment")
}

func TestParseOpensAt(t *testing.T) {
	ms, err := parseOpensAt("2026-12-01T10:00:00Z")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixMilli(), ms)
	ms, err = parseOpensAt("0")
	require.NoError(t, err)
	require.Zero(t, ms)
	_, err = parseOpensAt("tomorrow")
	require.ErrorContains(t, err, "RFC 3339")
	code, _, stderr := run(t, "items", "set", "x", "--opens-at", "-5", "--admin-token", "t")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, stderr, "--opens-at")
}
