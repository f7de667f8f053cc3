package ingest_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// pipeline is the consumer service (ingest.Run) over kfake and a
// redis-server of its own, with a producer to feed it.
type pipeline struct {
	t       *testing.T
	brokers []string
	redis   *testenv.RedisServer
	rdb     *redis.Client
	prod    *kgo.Client
	adm     *kadm.Client
	cfg     ingest.Config
	http    string // the consumer's /healthz /readyz /metrics, once started
}

func newPipeline(t *testing.T, partitions int32, items ...string) *pipeline {
	p := &pipeline{t: t, brokers: testenv.Kafka(t, partitions), redis: testenv.StartRedis(t)}
	p.rdb = p.redis.Client()
	var err error
	p.prod, err = kgo.NewClient(kgo.SeedBrokers(p.brokers...), kgo.ProducerLinger(5*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(p.prod.Close)
	p.adm = kadm.NewClient(p.prod)
	for _, id := range items {
		p.publishItem(id)
	}
	p.cfg = ingest.Config{Group: "waitroom-consumer", ItemsGroup: "waitroom-items", MaxPollRecords: 2000, MaxBackoff: 200 * time.Millisecond,
		RecordAttempts: 3, RecordBackoff: 10 * time.Millisecond,
		Kafka: config.Kafka{Brokers: p.brokers, ClientID: "test"},
		Redis: config.Redis{Addr: p.redis.Addr, PoolSize: 16}, HTTP: config.HTTP{ShutdownTimeout: time.Second}}
	return p
}

func (p *pipeline) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	p.t.Cleanup(cancel)
	return ctx
}

// start runs the consumer until the test ends.
func (p *pipeline) start() { p.http = p.member() }

// member runs a member of the consumer group until the test ends and
// returns the base URL of its HTTP server (/metrics).
func (p *pipeline) member() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(p.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := zaptest.NewLogger(p.t, zaptest.Level(zap.ErrorLevel))
	go func() { done <- ingest.Run(ctx, p.cfg, ln, log, nil) }()
	p.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			p.t.Errorf("consumer: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// metricsOf reads the /metrics of the member at base.
func metricsOf(base string) (string, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// batchRetries reads the consumer's count of failed registration batches it
// retried, from its /metrics.
func (p *pipeline) batchRetries() float64 {
	p.t.Helper()
	b, err := metricsOf(p.http)
	require.NoError(p.t, err)
	prefix := `waitroom_consumer_batch_retries_total{topic="` + topics.Registrations + `"} `
	for _, line := range strings.Split(b, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, err := strconv.ParseFloat(v, 64)
			require.NoError(p.t, err)
			return n
		}
	}
	return 0
}

func (p *pipeline) publishItem(id string) {
	p.t.Helper()
	s := topics.ItemState{V: 1, ItemID: id, Name: id, Stock: topics.Unlimited, Enabled: true, Version: 1, UpdatedAt: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 1, SessionTTLSeconds: 60}}
	require.NoError(p.t, p.prod.ProduceSync(p.ctx(), &kgo.Record{Topic: topics.Items, Key: []byte(id), Value: topics.Encode(&s)}).FirstErr())
}

// register builds a registration as the API does: the event, keyed by itemId.
func register(item, user string) *kgo.Record {
	ev := topics.RegistrationEvent{V: topics.Version, Kind: topics.KindRegister, TokenID: "tok-" + user, ItemID: item, UserID: user,
		RequestedAt: time.Now().UnixMilli(), Client: &topics.ClientMeta{IP: "127.0.0.1"}}
	return &kgo.Record{Topic: topics.Registrations, Key: []byte(item), Value: topics.Encode(&ev)}
}

// produce sends recs in order and returns them with their partitions and offsets.
func (p *pipeline) produce(recs []*kgo.Record) []*kgo.Record {
	p.t.Helper()
	res := p.prod.ProduceSync(p.ctx(), recs...)
	require.NoError(p.t, res.FirstErr())
	return recs
}

func (p *pipeline) line(item string) []string {
	p.t.Helper()
	got, err := queue.New(p.rdb).Waiting(context.Background(), item, 0)
	require.NoError(p.t, err)
	return got
}

func (p *pipeline) seq(item string) int {
	p.t.Helper()
	n, err := p.rdb.Get(context.Background(), queue.KeysFor(item).Seq).Int()
	if err == redis.Nil {
		return 0
	}
	require.NoError(p.t, err)
	return n
}

// waitLines waits until every item's line is want[item], in order.
func (p *pipeline) waitLines(want map[string][]string) {
	p.t.Helper()
	require.Eventually(p.t, func() bool {
		for item, w := range want {
			if len(p.line(item)) != len(w) {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "lines did not fill")
	for item, w := range want {
		assert.Equal(p.t, w, p.line(item), "order of %s", item)
	}
}

// deadLetters lists the registrations DLQ, one entry per source record (dead
// letters are at least once).
func (p *pipeline) deadLetters() map[string]dlq.Entry {
	p.t.Helper()
	l, err := dlq.NewInspector([]kgo.Opt{kgo.SeedBrokers(p.brokers...)}).List(p.ctx(), topics.DLQ(topics.Registrations), dlq.Filter{})
	require.NoError(p.t, err)
	out := map[string]dlq.Entry{}
	for _, e := range l.Entries {
		out[e.Verdict.Source()] = e
	}
	return out
}

// committedToEnd waits until the consumer group has committed every record of
// the registrations topic.
func (p *pipeline) committedToEnd() {
	p.t.Helper()
	require.Eventually(p.t, func() bool {
		ends, err := p.adm.ListEndOffsets(context.Background(), topics.Registrations)
		if err != nil {
			return false
		}
		got, err := p.adm.FetchOffsets(context.Background(), p.cfg.Group)
		if err != nil {
			return false
		}
		done := true
		ends.Each(func(o kadm.ListedOffset) {
			c, ok := got.Lookup(topics.Registrations, o.Partition)
			if o.Offset > 0 && (!ok || c.At < o.Offset) {
				done = false
			}
		})
		return done
	}, 30*time.Second, 20*time.Millisecond, "the consumer group did not commit to the end")
}

func source(r *kgo.Record) string {
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
}

// 10,000 good registrations with 100 malformed and 100 valid-but-invalid ones
// among them: the good ones are in their lines in order, exactly once; every
// bad one is in the DLQ with its error type and source. Then the missing item
// is published and the DLQ replayed: the unknown-item registrations join the
// line, the others are kept back and reported, nothing is doubled, and a
// second replay replays nothing.
func TestBadRecordsDeadLetteredThenReplayed(t *testing.T) {
	items := []string{"alpha", "beta", "gamma", "delta"}
	p := newPipeline(t, 6, items...)
	rng := rand.New(rand.NewPCG(6, 6))

	var recs []*kgo.Record
	kinds := map[*kgo.Record]string{} // bad record -> its expected error type ("" for unknown item)
	for i := range 10_000 {
		recs = append(recs, register(items[i%len(items)], fmt.Sprintf("u%05d", i)))
	}
	insert := func(r *kgo.Record, kind string) {
		at := rng.IntN(len(recs) + 1)
		recs = append(recs[:at], append([]*kgo.Record{r}, recs[at:]...)...)
		kinds[r] = kind
	}
	for i := range 100 {
		item := items[i%len(items)]
		var v []byte
		switch i % 4 {
		case 0:
			v = []byte("\x00not json{")
		case 1:
			v = []byte(`{"v":2,"kind":"register","tokenId":"t","itemId":"` + item + `","userId":"x","requestedAt":1}`)
		case 2:
			v = []byte(`{"v":1,"kind":"register","tokenId":"t","itemId":"` + item + `","userId":"x","requestedAt":1,"admin":true}`)
		case 3:
			v = []byte(`{"v":1,"kind":"register"`)
		}
		insert(&kgo.Record{Topic: topics.Registrations, Key: []byte(item), Value: v}, topics.ErrorTypeParsing)
	}
	var ghosts []string // the unknown item's tokens, in produce order
	for i := range 100 {
		if i%2 == 0 {
			user := fmt.Sprintf("g%03d", i)
			insert(register("ghost", user), "")
			continue
		}
		r := register(items[i%len(items)], fmt.Sprintf("bad id %d", i)) // a space: not an id
		insert(r, topics.ErrorTypeValidation)
	}
	p.produce(recs)
	want := map[string][]string{}
	for _, r := range recs {
		kind, bad := kinds[r]
		if !bad {
			ev, err := topics.DecodeRegistration(r.Value)
			require.NoError(t, err)
			want[ev.ItemID] = append(want[ev.ItemID], ev.TokenID)
		} else if kind == "" {
			ev, err := topics.DecodeRegistration(r.Value)
			require.NoError(t, err)
			ghosts = append(ghosts, ev.TokenID)
		}
	}
	require.Len(t, ghosts, 50)
	p.start()

	p.waitLines(want)
	var dead map[string]dlq.Entry
	require.Eventually(t, func() bool { dead = p.deadLetters(); return len(dead) >= 200 }, 30*time.Second, 50*time.Millisecond)
	require.Len(t, dead, 200, "exactly the bad records")
	for r, kind := range kinds {
		e, ok := dead[source(r)]
		require.True(t, ok, "%s is not in the DLQ", source(r))
		if kind == "" {
			assert.Equal(t, topics.ErrorTypeValidation, e.Verdict.ErrorType)
			assert.Contains(t, e.Verdict.Error, `unknown item "ghost"`)
		} else {
			assert.Equal(t, kind, e.Verdict.ErrorType, "%s: %s", source(r), e.Verdict.Error)
		}
		assert.Equal(t, r.Value, e.Value, "the original bytes")
		assert.Equal(t, r.Key, e.Key)
		assert.Equal(t, 1, e.Verdict.Attempts)
	}
	for _, id := range items {
		assert.Equal(t, 2500, p.seq(id), "%s: every good record applied once", id)
	}
	p.committedToEnd()

	// Fix the cause, then replay.
	p.publishItem("ghost")
	rp := dlq.NewReplayer([]kgo.Opt{kgo.SeedBrokers(p.brokers...)})
	topic := topics.DLQ(topics.Registrations)
	dry, err := rp.Replay(p.ctx(), topic, dlq.ReplayOptions{DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, 50, dry.Replayed)
	rep, err := rp.Replay(p.ctx(), topic, dlq.ReplayOptions{Rate: 1000})
	require.NoError(t, err)
	assert.Equal(t, 200, rep.Examined)
	assert.Equal(t, 50, rep.Replayed, "the unknown-item ones")
	assert.Equal(t, 150, rep.StillInvalid, "malformed and bad ids are kept back, reported")
	p.waitLines(map[string][]string{"ghost": ghosts})
	p.committedToEnd()
	assert.Equal(t, 50, p.seq("ghost"))
	for _, id := range items {
		assert.Equal(t, 2500, p.seq(id), "%s: nothing doubled", id)
	}
	assert.Len(t, p.deadLetters(), 200, "nothing came back to the DLQ")

	again, err := rp.Replay(p.ctx(), topic, dlq.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, again.Examined)
	assert.Equal(t, 0, again.Replayed, "a second replay replays nothing")

	// Replaying registrations already in the line (forced by --reset) changes nothing.
	reset, err := rp.Replay(p.ctx(), topic, dlq.ReplayOptions{Reset: true, Filter: dlq.Filter{ErrorType: topics.ErrorTypeValidation}})
	require.NoError(t, err)
	assert.Equal(t, 50, reset.Replayed)
	p.committedToEnd()
	assert.Equal(t, ghosts, p.line("ghost"))
	assert.Equal(t, 50, p.seq("ghost"))
}

// Redis stopped for a few seconds mid-stream: the partitions pause, nothing
// goes to the DLQ and nothing is committed; once Redis is back (empty: it has
// no persistence) the consumer rebuilds the view from Kafka, so every record
// produced before, during and after the outage is in the line, in order, once,
// and the group commits to the end.
func TestRedisOutageDeadLettersNothing(t *testing.T) {
	items := []string{"a", "b", "c"}
	p := newPipeline(t, 3, items...)
	p.start()
	batch := func(from, n int) (map[string][]string, []*kgo.Record) {
		want := map[string][]string{}
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			item := items[i%len(items)]
			recs = append(recs, register(item, fmt.Sprintf("u%05d", i)))
			want[item] = append(want[item], fmt.Sprintf("tok-u%05d", i))
		}
		return want, recs
	}
	wantA, recsA := batch(0, 1500)
	p.produce(recsA)
	p.waitLines(wantA)
	p.committedToEnd()
	before, err := p.adm.FetchOffsets(p.ctx(), p.cfg.Group)
	require.NoError(t, err)

	retried := p.batchRetries()
	p.redis.Stop()
	wantB, recsB := batch(1500, 1500)
	p.produce(recsB)
	// Nothing is pending but these records: once the consumer has failed on
	// them twice, it had every chance to commit or dead-letter them.
	require.Eventually(t, func() bool { return p.batchRetries() >= retried+2 }, 30*time.Second, 20*time.Millisecond,
		"the consumer never tried the records produced while Redis is down")
	during, err := p.adm.FetchOffsets(p.ctx(), p.cfg.Group)
	require.NoError(t, err)
	assert.Equal(t, before.Offsets(), during.Offsets(), "nothing committed while Redis is down")
	assert.Empty(t, p.deadLetters(), "nothing dead-lettered while Redis is down")

	p.redis.Start()
	wantC, recsC := batch(3000, 1500)
	p.produce(recsC)
	for item := range wantA {
		wantA[item] = append(append(wantA[item], wantB[item]...), wantC[item]...)
	}
	p.waitLines(wantA)
	p.committedToEnd()
	for _, id := range items {
		assert.Equal(t, 1500, p.seq(id), "%s: each record applied once, those from before the loss too", id)
	}
	assert.Empty(t, p.deadLetters())
}

// Replaying letters whose cause is not fixed yet: they fail again and come
// back to the DLQ once each, carrying replayed-from. Every later replay passes
// those copies over and publishes nothing, however often it runs; once the
// cause is fixed, --reset sends each original letter once and the line gets
// each registration exactly once.
func TestReplayThatFailsAgainIsIdempotent(t *testing.T) {
	p := newPipeline(t, 3, "alpha")
	p.start()
	var ghosts []string
	var recs []*kgo.Record
	for i := range 3 {
		user := fmt.Sprintf("g%d", i)
		recs = append(recs, register("ghost", user))
		ghosts = append(ghosts, "tok-"+user)
	}
	p.produce(recs)
	require.Eventually(t, func() bool { return len(p.deadLetters()) == 3 }, 30*time.Second, 20*time.Millisecond)
	p.committedToEnd()

	rp := dlq.NewReplayer([]kgo.Opt{kgo.SeedBrokers(p.brokers...)})
	topic := topics.DLQ(topics.Registrations)
	first, err := rp.Replay(p.ctx(), topic, dlq.ReplayOptions{})
	require.NoError(t, err)
	require.Equal(t, 3, first.Replayed, "the item is still unknown: the replays fail again")
	origins := map[string]bool{}
	for _, e := range p.deadLetters() {
		origins[e.Ref()] = true
	}
	var copies []dlq.Entry
	require.Eventually(t, func() bool {
		copies = copies[:0]
		for _, e := range p.deadLetters() {
			if e.Verdict.ReplayedFrom != "" {
				copies = append(copies, e)
			}
		}
		return len(copies) == 3
	}, 30*time.Second, 20*time.Millisecond, "the failed replays came back to the DLQ")
	p.committedToEnd()
	for _, c := range copies {
		assert.True(t, origins[c.Verdict.ReplayedFrom], "copy %s names its letter, not %q", c.ID(), c.Verdict.ReplayedFrom)
	}

	// Run again, twice: the copies are passed over and nothing is published.
	ends := func() map[int32]int64 {
		l, err := p.adm.ListEndOffsets(p.ctx(), topics.Registrations)
		require.NoError(t, err)
		out := map[int32]int64{}
		l.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
		return out
	}
	before := ends()
	second, err := rp.Replay(p.ctx(), topic, dlq.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, 3, second.Examined)
	assert.Equal(t, 0, second.Replayed, "a replay that failed again is not sent again")
	assert.Equal(t, 3, second.FailedAgain)
	for _, o := range second.Outcomes {
		assert.Equal(t, dlq.ActionFailedAgain, o.Action)
	}
	third, err := rp.Replay(p.ctx(), topic, dlq.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, third.Examined+third.Replayed)
	assert.Equal(t, before, ends(), "no run after the failed one published anything")
	assert.Len(t, p.deadLetters(), 6, "one copy per letter, not one per run")

	// Cause fixed: --reset sends the three letters once, not their copies.
	p.publishItem("ghost")
	reset, err := rp.Replay(p.ctx(), topic, dlq.ReplayOptions{Reset: true})
	require.NoError(t, err)
	assert.Equal(t, 3, reset.Replayed)
	assert.Equal(t, 3, reset.FailedAgain)
	p.waitLines(map[string][]string{"ghost": ghosts})
	p.committedToEnd()
	assert.Equal(t, 3, p.seq("ghost"), "each registration applied once")
	assert.Len(t, p.deadLetters(), 6, "nothing came back")
}

// An item named "view" would share the view marker's keys (wr:{view}:…): its
// record and its tombstone are dead-lettered as VALIDATION_ERROR with the
// reason in the error header, and nothing is written under wr:{view}:…; the
// item published after them is applied, so the consumer did read them.
func TestReservedItemIDDeadLettered(t *testing.T) {
	p := newPipeline(t, 1) // one partition: "after" is read after both
	p.start()
	p.publishItem(topics.ReservedItemID)
	p.produce([]*kgo.Record{{Topic: topics.Items, Key: []byte(topics.ReservedItemID)}})
	p.publishItem("after")
	line := queue.New(p.rdb)
	require.Eventually(t, func() bool {
		_, ok, err := line.Item(context.Background(), "after")
		return err == nil && ok
	}, 30*time.Second, 20*time.Millisecond, "the item after the reserved one is applied")

	var l dlq.List
	require.Eventually(t, func() bool {
		var err error
		l, err = dlq.NewInspector([]kgo.Opt{kgo.SeedBrokers(p.brokers...)}).List(p.ctx(), topics.DLQ(topics.Items), dlq.Filter{})
		return err == nil && len(l.Entries) >= 2
	}, 30*time.Second, 20*time.Millisecond, "both records of the reserved item are dead-lettered")
	tombstones := 0
	for _, e := range l.Entries {
		assert.Equal(t, topics.ReservedItemID, string(e.Key))
		assert.Equal(t, topics.ErrorTypeValidation, e.Verdict.ErrorType)
		assert.Contains(t, e.Verdict.Error, `itemId "view" is reserved`)
		if e.Value == nil {
			tombstones++
		}
	}
	assert.Equal(t, 1, tombstones, "the tombstone is one of them")
	_, ok, err := line.Item(context.Background(), topics.ReservedItemID)
	require.NoError(t, err)
	assert.False(t, ok, "no item state under wr:{view}:…")
	n, err := p.rdb.Exists(context.Background(), queue.KeysFor(topics.ReservedItemID).State).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}
