package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

func TestTopicsCheckRetentionAgainstTheLines(t *testing.T) {
	ctx := context.Background()
	seeds := testenv.Kafka(t, 1)
	brokers := strings.Join(seeds, ",")
	srv := testenv.StartRedis(t)
	rdb, addr := srv.Client(), srv.Addr
	l := queue.New(rdb)
	require.NoError(t, l.Load(ctx))
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()

	// Five people registered 2 hours ago, all still waiting.
	var recs []*kgo.Record
	for i := range 5 {
		ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: fmt.Sprint("t", i), ItemID: "gig", UserID: fmt.Sprint("u", i), RequestedAt: 1}
		recs = append(recs, &kgo.Record{Topic: topics.Registrations, Key: []byte("gig"), Value: topics.Encode(&ev), Timestamp: time.Now().Add(-2 * time.Hour)})
	}
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	var ops []queue.Op
	for i, r := range recs {
		ops = append(ops, queue.Op{Kind: queue.OpRegister, ItemID: "gig", TokenID: fmt.Sprint("t", i), UserID: fmt.Sprint("u", i), Partition: r.Partition, Offset: r.Offset})
	}
	_, err = l.Apply(ctx, ops)
	require.NoError(t, err)

	r := runBin(t, []string{"WR_REGISTRATION_PARTITIONS=1", "WR_KAFKA_BROKERS=" + brokers, "WR_REDIS_ADDR=" + addr}, "topics", "check")
	require.Equal(t, ExitOK, r.code, r)
	assert.Regexp(t, `waitroom.registrations\s+7d\s+5\s+gig/t0\s+2h\s+0`, r.stdout)
	assert.Contains(t, r.stdout, "rebuild complete: Kafka holds every record the 1 live lines need")
	assert.NotContains(t, r.stdout, "warning:")

	// Retention of one hour: still there, but Kafka may delete it any time.
	adm := kadm.NewClient(cl)
	hour := "3600000"
	_, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: &hour}}, topics.Registrations, topics.Admissions)
	require.NoError(t, err)
	r = runBin(t, []string{"WR_REGISTRATION_PARTITIONS=1", "WR_KAFKA_BROKERS=" + brokers}, "topics", "check", "--redis", addr)
	require.Equal(t, ExitFailure, r.code, "the configs differ from the contract now: %s", r)
	assert.Contains(t, r.stdout, "warning: waitroom.registrations: retention 1h is shorter than the age 2h of the oldest live entry's register record (gig/t0")

	// Kafka deleted the first two: a rebuild would lose t0 and t1.
	_, err = adm.DeleteRecords(ctx, kadm.Offsets{topics.Registrations: {0: {Topic: topics.Registrations, Partition: 0, At: 2}}})
	require.NoError(t, err)
	r = runBin(t, []string{"WR_REGISTRATION_PARTITIONS=1", "WR_KAFKA_BROKERS=" + brokers}, "-o", "json", "topics", "check", "--redis", addr)
	require.Equal(t, ExitFailure, r.code, r)
	var out struct {
		Complete  *bool `json:"rebuildComplete"`
		Failures  []string
		Retention []struct {
			Topic   string
			Missing int
		}
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.NotNil(t, out.Complete)
	assert.False(t, *out.Complete)
	assert.Equal(t, []string{"waitroom.registrations: 2 of 5 live entries have no register record left (deleted by retention; one is gig/t0): a rebuild now would be incomplete"}, out.Failures)
	assert.Equal(t, 2, out.Retention[0].Missing)

	// Without Redis, topics check does not look at the lines.
	r = runBin(t, []string{"WR_REGISTRATION_PARTITIONS=1", "WR_KAFKA_BROKERS=" + brokers}, "topics", "check")
	assert.NotContains(t, r.stdout, "RETENTION")
}
