package retention_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/retention"
	"github.com/waitroom/waitroom/pkg/redisview/snapshot"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

type env struct {
	t     *testing.T
	ctx   context.Context
	seeds []string
	cl    *kgo.Client
	adm   *kadm.Client
	rdb   redis.UniversalClient
	line  *queue.Line
	now   time.Time
}

func newEnv(t *testing.T) *env {
	ctx := context.Background()
	seeds := testenv.Kafka(t, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	rdb := testenv.Redis(t)
	l := queue.New(rdb)
	require.NoError(t, l.Load(ctx))
	e := &env{t: t, ctx: ctx, seeds: seeds, cl: cl, adm: kadm.NewClient(cl), rdb: rdb, line: l, now: time.Now()}
	e.setRetention(topics.Registrations, 7*24*time.Hour)
	e.setRetention(topics.Admissions, 7*24*time.Hour)
	_, err = l.ApplyItem(ctx, topics.ItemState{V: 1, ItemID: "gig", Name: "gig", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 2, MaxActive: 100, SessionTTLSeconds: 3600}})
	require.NoError(t, err)
	return e
}

func (e *env) setRetention(topic string, d time.Duration) {
	v := strconv.FormatInt(d.Milliseconds(), 10)
	_, err := e.adm.AlterTopicConfigs(e.ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: &v}}, topic)
	require.NoError(e.t, err)
}

// register produces n registrations of gig made ago before now and applies
// them to the line as the consumer would.
func (e *env) register(from, n int, ago time.Duration) {
	var recs []*kgo.Record
	for i := from; i < from+n; i++ {
		ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: fmt.Sprint("t", i), ItemID: "gig", UserID: fmt.Sprint("u", i), RequestedAt: 1}
		recs = append(recs, &kgo.Record{Topic: topics.Registrations, Key: []byte("gig"), Value: topics.Encode(&ev), Timestamp: e.now.Add(-ago)})
	}
	require.NoError(e.t, e.cl.ProduceSync(e.ctx, recs...).FirstErr())
	ops := make([]queue.Op, len(recs))
	for i, r := range recs {
		ops[i] = queue.Op{Kind: queue.OpRegister, ItemID: "gig", TokenID: fmt.Sprint("t", from+i), UserID: fmt.Sprint("u", from+i), Partition: r.Partition, Offset: r.Offset}
	}
	_, err := e.line.Apply(e.ctx, ops)
	require.NoError(e.t, err)
}

// admit promotes (2 people, the rate) as the scheduler would ago before now,
// and publishes the admission event.
func (e *env) admit(ago time.Duration) {
	tick, err := e.line.Promote(e.ctx, "gig", 1, e.now.Add(-ago), time.Second)
	require.NoError(e.t, err)
	require.NotEmpty(e.t, tick.Unpublished)
	ev := topics.AdmissionEvent{V: 1, ItemID: "gig", Admitted: tick.Unpublished, Head: tick.Head, Epoch: 1, At: e.now.Add(-ago).UnixMilli()}
	require.NoError(e.t, e.cl.ProduceSync(e.ctx, &kgo.Record{Topic: topics.Admissions, Key: []byte("gig"), Value: topics.Encode(&ev), Timestamp: e.now.Add(-ago)}).FirstErr())
	require.NoError(e.t, e.line.AckPublished(e.ctx, 1, []string{"gig"}, []int{len(tick.Unpublished)}))
}

func (e *env) check() retention.Report {
	r, err := retention.New([]kgo.Opt{kgo.SeedBrokers(e.seeds...)}, e.rdb).Check(e.ctx, e.now)
	require.NoError(e.t, err)
	return r
}

func TestHealthyRetention(t *testing.T) {
	e := newEnv(t)
	e.register(0, 5, 3*time.Hour)
	e.register(5, 5, time.Hour)
	e.admit(30 * time.Minute)

	r := e.check()
	assert.Empty(t, r.Failures)
	assert.Empty(t, r.Warnings)
	assert.True(t, r.Complete())
	assert.Equal(t, 1, r.Items)
	assert.Equal(t, 10, r.Registrations.Needed)
	require.NotNil(t, r.Registrations.Oldest)
	assert.Equal(t, "t0", r.Registrations.Oldest.Token)
	assert.InDelta(t, (3 * time.Hour).Seconds(), r.Registrations.Age(e.now).Seconds(), 1)
	assert.Equal(t, 2, r.Admissions.Needed)
	require.NotNil(t, r.Admissions.Oldest)
	assert.InDelta(t, (30 * time.Minute).Seconds(), r.Admissions.Age(e.now).Seconds(), 1)
	assert.Equal(t, 7*24*time.Hour, r.Registrations.Retention)
}

func TestRetentionShorterThanOldestLiveEntryWarns(t *testing.T) {
	e := newEnv(t)
	e.register(0, 3, 3*time.Hour)
	e.register(3, 3, 10*time.Minute)
	e.setRetention(topics.Registrations, 2*time.Hour)
	e.setRetention(topics.Admissions, 2*time.Hour)

	r := e.check()
	assert.True(t, r.Complete(), "the records are still there: %v", r.Failures)
	require.Len(t, r.Warnings, 1, r.Warnings)
	assert.Contains(t, r.Warnings[0], "waitroom.registrations: retention 2h is shorter than the age 3h of the oldest live entry's register record (gig/t0")

	// Once everyone older than the retention has left, all is well again.
	_, err := e.line.Apply(e.ctx, []queue.Op{
		{Kind: queue.OpLeave, ItemID: "gig", TokenID: "t0", UserID: "u0", Partition: 0, Offset: 100},
		{Kind: queue.OpLeave, ItemID: "gig", TokenID: "t1", UserID: "u1", Partition: 0, Offset: 101},
		{Kind: queue.OpLeave, ItemID: "gig", TokenID: "t2", UserID: "u2", Partition: 0, Offset: 102},
	})
	require.NoError(t, err)
	r = e.check()
	assert.Empty(t, r.Warnings)
	assert.Equal(t, "t3", r.Registrations.Oldest.Token)
}

func TestDeletedRecordsFailTheCheck(t *testing.T) {
	e := newEnv(t)
	e.register(0, 4, 2*time.Hour)
	e.admit(50 * time.Minute) // t0, t1 (inside their hour)
	e.register(4, 4, time.Hour)
	e.admit(time.Minute) // t2, t3

	// Kafka deleted the first three registrations and the first admission event.
	_, err := e.adm.DeleteRecords(e.ctx, kadm.Offsets{
		topics.Registrations: {0: {Topic: topics.Registrations, Partition: 0, At: 3}},
		topics.Admissions:    {0: {Topic: topics.Admissions, Partition: 0, At: 1}},
	})
	require.NoError(t, err)

	r := e.check()
	assert.False(t, r.Complete())
	require.Len(t, r.Failures, 2, r.Failures)
	assert.Equal(t, "waitroom.registrations: 3 of 8 live entries have no register record left (deleted by retention; one is gig/t0): a rebuild now would be incomplete", r.Failures[0])
	assert.Equal(t, "waitroom.admissions: 2 of 4 live entries have no admission event left (deleted by retention; one is gig/t0): a rebuild now would be incomplete", r.Failures[1])
	assert.Equal(t, "t3", r.Registrations.Oldest.Token)
}

func TestAdmissionsKeptShorterThanRegistrationsWarns(t *testing.T) {
	e := newEnv(t)
	e.setRetention(topics.Admissions, 24*time.Hour)
	r := e.check()
	assert.True(t, r.Complete())
	require.Len(t, r.Warnings, 1)
	assert.Equal(t, "waitroom.admissions keeps 1d but waitroom.registrations keeps 7d: a rebuild would queue again anyone admitted more than 1d ago whose registration is still kept; keep admissions at least as long as registrations", r.Warnings[0])
	assert.Equal(t, 0, r.Registrations.Needed, "no live line: nothing needed")
}

func TestHuman(t *testing.T) {
	assert.Equal(t, "7d", retention.Human(7*24*time.Hour))
	assert.Equal(t, "2d3h", retention.Human(51*time.Hour))
	assert.Equal(t, "5h", retention.Human(5*time.Hour+10*time.Minute))
	assert.Equal(t, "45m0s", retention.Human(45*time.Minute))
}

// With a snapshot of the line, the entries it holds need no record: Kafka
// may delete their registrations; the records after the snapshot must stay.
func TestSnapshotCoversTheRecordsBeforeIt(t *testing.T) {
	e := newEnv(t)
	require.NoError(t, view.SetReady(e.ctx, e.rdb, "g1", nil, e.now))
	e.register(0, 4, 3*time.Hour) // offsets 0-3
	e.admit(2 * time.Hour)        // t0, t1
	_, err := snapshot.NewWriter(e.rdb, e.cl, zap.NewNop()).Write(e.ctx, "gig")
	require.NoError(t, err)
	e.register(4, 4, time.Hour) // offsets 4-7: the tail
	e.admit(time.Minute)        // t2, t3: admitted after the snapshot

	_, err = e.adm.DeleteRecords(e.ctx, kadm.Offsets{topics.Registrations: {0: {Topic: topics.Registrations, Partition: 0, At: 4}}})
	require.NoError(t, err)
	r := e.check()
	assert.True(t, r.Complete(), "the snapshot holds the deleted ones: %v", r.Failures)
	assert.Equal(t, 1, r.Snapshots)
	assert.Equal(t, 4, r.Registrations.Needed, "t4-t7 (after the snapshot)")
	assert.Equal(t, 2, r.Admissions.Needed, "t2, t3 (admitted after the snapshot); t0, t1 are admitted in it")

	// One record after the snapshot deleted: a rebuild would miss it.
	_, err = e.adm.DeleteRecords(e.ctx, kadm.Offsets{topics.Registrations: {0: {Topic: topics.Registrations, Partition: 0, At: 5}}})
	require.NoError(t, err)
	r = e.check()
	assert.False(t, r.Complete())
	assert.Contains(t, r.Failures, "waitroom.registrations/0: the records 4 to 4 after the latest snapshot of gig are deleted (by retention): a rebuild now would be incomplete")
}
