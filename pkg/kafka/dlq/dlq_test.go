package dlq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/dlq"
	"github.com/waitroom/waitroom/topics"
)

func TestTopic(t *testing.T) {
	for in, want := range map[string]string{
		"registrations":              "waitroom.registrations.dlq",
		"items":                      "waitroom.items.dlq",
		"admissions":                 "waitroom.admissions.dlq",
		"waitroom.items":             "waitroom.items.dlq",
		"waitroom.registrations.dlq": "waitroom.registrations.dlq",
		"other.dlq":                  "other.dlq",
	} {
		got, err := dlq.Topic(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "waitroom.registrations.x", ".dlq", "orders"} {
		_, err := dlq.Topic(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseID(t *testing.T) {
	p, o, err := dlq.ParseID("2/42")
	require.NoError(t, err)
	assert.Equal(t, int32(2), p)
	assert.Equal(t, int64(42), o)
	for _, bad := range []string{"", "2", "2/", "/4", "a/1", "1/b", "-1/3", "1/-3", "1/2/3", "+1/2", "1/+2", " 1/2"} {
		_, _, err := dlq.ParseID(bad)
		assert.Error(t, err, bad)
	}
}

func TestCheck(t *testing.T) {
	ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: "t", ItemID: "i", UserID: "u", RequestedAt: 1}
	it := topics.ItemState{V: 1, ItemID: "i", Stock: -1, Version: 1}
	cases := []struct {
		name, source string
		key          string
		value        []byte
		want         error
	}{
		{"good registration", topics.Registrations, "i", topics.Encode(&ev), nil},
		{"garbage", topics.Registrations, "i", []byte("\x00{"), topics.ErrMalformed},
		{"key differs", topics.Registrations, "j", topics.Encode(&ev), topics.ErrInvalid},
		{"good item", topics.Items, "i", topics.Encode(&it), nil},
		{"tombstone", topics.Items, "i", nil, nil},
		{"bad tombstone", topics.Items, "a b", nil, topics.ErrInvalid},
		{"bad admission", topics.Admissions, "i", []byte(`{"v":9}`), topics.ErrMalformed},
		{"unknown source", "orders", "x", []byte("anything"), nil},
	}
	for _, c := range cases {
		err := dlq.Check(c.source, []byte(c.key), c.value)
		if c.want == nil {
			assert.NoError(t, err, c.name)
		} else {
			assert.ErrorIs(t, err, c.want, c.name)
		}
	}
}

func TestEntryJSONKeepsBytes(t *testing.T) {
	for _, v := range [][]byte{[]byte(`{"v":1}`), {0xff, 0x00, '{'}, nil} {
		e := dlq.Entry{Topic: "x.dlq", Partition: 1, Offset: 2, Key: []byte("k"), Value: v,
			Verdict: dlq.Verdict{ErrorType: topics.ErrorTypeParsing, Attempts: 1}}
		b, err := json.Marshal(e)
		require.NoError(t, err)
		var back dlq.Entry
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, string(v), string(back.Value))
		assert.Equal(t, e.Verdict, back.Verdict)
	}
}

// env is a kfake cluster with the contract's topics and a producer.
type env struct {
	t       *testing.T
	brokers []string
	cl      *kgo.Client
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, brokers: testenv.Kafka(t, 3)}
	var err error
	e.cl, err = kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	require.NoError(t, err)
	t.Cleanup(e.cl.Close)
	return e
}

func (e *env) base() []kgo.Opt { return []kgo.Opt{kgo.SeedBrokers(e.brokers...)} }

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// deadLetter produces n source records and dead-letters them with err,
// returning the source records (with their offsets).
func (e *env) deadLetter(n int, err error, value func(i int) []byte) []*kgo.Record {
	e.t.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topics.Registrations, Key: []byte(fmt.Sprintf("item%d", i%4)), Value: value(i),
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte(fmt.Sprint("t", i))}}}
	}
	require.NoError(e.t, e.cl.ProduceSync(e.ctx(), recs...).FirstErr())
	letters := make([]dlq.Letter, n)
	for i, r := range recs {
		letters[i] = dlq.Letter{Record: r, Err: err, Attempts: 1}
	}
	require.NoError(e.t, dlq.NewWriter(e.cl).Send(e.ctx(), letters...))
	return recs
}

func registration(i int) []byte {
	item := fmt.Sprintf("item%d", i%4)
	return topics.Encode(&topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, TokenID: fmt.Sprint("tok", i), ItemID: item, UserID: fmt.Sprint("u", i), RequestedAt: 1})
}

// replayed reads the registrations topic to its end and returns what
// replays published there.
func (e *env) replayed() []*kgo.Record {
	e.t.Helper()
	ends, err := kadm.NewClient(e.cl).ListEndOffsets(e.ctx(), topics.Registrations)
	require.NoError(e.t, err)
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(topics.Registrations),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(e.t, err)
	defer cl.Close()
	ctx := e.ctx()
	var out []*kgo.Record
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		require.NoError(e.t, ctx.Err())
		fs.EachRecord(func(r *kgo.Record) {
			if dlq.Header(r, topics.HeaderReplayedFrom) != "" {
				out = append(out, r)
			}
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
		})
	}
	return out
}

func TestListShowReplay(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx()
	topic := topics.DLQ(topics.Registrations)
	bad := e.deadLetter(6, fmt.Errorf("%w: not json", topics.ErrMalformed), func(int) []byte { return []byte("\x00garbage") })
	mid := time.Now()
	time.Sleep(5 * time.Millisecond)
	good := e.deadLetter(10, fmt.Errorf("%w: unknown item", topics.ErrInvalid), registration)

	in := dlq.NewInspector(e.base())
	all, err := in.List(ctx, topic, dlq.Filter{})
	require.NoError(t, err)
	require.Len(t, all.Entries, 16)
	assert.False(t, all.Truncated)
	bySource := map[int64]dlq.Entry{}
	for _, en := range all.Entries {
		assert.Equal(t, topics.Registrations, en.Verdict.SourceTopic)
		assert.Equal(t, 1, en.Verdict.Attempts)
		assert.False(t, en.Verdict.FailedAt.IsZero())
		bySource[en.Verdict.SourceOffset*10+int64(en.Verdict.SourcePartition)] = en
	}
	require.Len(t, bySource, 16, "every source position once")

	parsing, err := in.List(ctx, topic, dlq.Filter{ErrorType: topics.ErrorTypeParsing})
	require.NoError(t, err)
	assert.Len(t, parsing.Entries, 6)
	since, err := in.List(ctx, topic, dlq.Filter{Since: mid})
	require.NoError(t, err)
	assert.Len(t, since.Entries, 10)
	limited, err := in.List(ctx, topic, dlq.Filter{Limit: 4})
	require.NoError(t, err)
	assert.Len(t, limited.Entries, 4)
	assert.True(t, limited.Truncated)
	for _, en := range limited.Entries {
		assert.Equal(t, topics.ErrorTypeParsing, en.Verdict.ErrorType, "the oldest come first")
	}
	_, err = in.List(ctx, topic, dlq.Filter{ErrorType: "OOPS"})
	assert.ErrorIs(t, err, dlq.ErrBadOptions)
	_, err = in.List(ctx, "nope.dlq", dlq.Filter{})
	assert.ErrorIs(t, err, dlq.ErrNoTopic)

	one := all.Entries[0]
	shown, err := in.Show(ctx, topic, one.Partition, one.Offset)
	require.NoError(t, err)
	assert.Equal(t, one.Value, shown.Value)
	assert.Equal(t, []dlq.KV{{Key: "trace", Value: "t" + fmt.Sprint(indexOf(bad, good, one))}}, shown.Extra)
	_, err = in.Show(ctx, topic, one.Partition, 999)
	assert.ErrorIs(t, err, dlq.ErrNotFound)
	_, err = in.Show(ctx, topic, 42, 0)
	assert.ErrorIs(t, err, dlq.ErrNotFound)

	rp := dlq.NewReplayer(e.base())
	dry, err := rp.Replay(ctx, topic, dlq.ReplayOptions{DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, 16, dry.Examined)
	assert.Equal(t, 10, dry.Replayed)
	assert.Equal(t, 6, dry.StillInvalid)
	assert.Empty(t, e.replayed(), "a dry run publishes nothing")

	start := time.Now()
	rep, err := rp.Replay(ctx, topic, dlq.ReplayOptions{Rate: 200})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 45*time.Millisecond, "10 records at 200/s")
	assert.Equal(t, 10, rep.Replayed)
	assert.Equal(t, 6, rep.StillInvalid)
	for _, o := range rep.Outcomes {
		if o.Action == dlq.ActionStillBad {
			assert.Contains(t, o.Reason, "malformed")
			continue
		}
		assert.Equal(t, dlq.ActionReplayed, o.Action)
		assert.True(t, strings.HasPrefix(o.To, topics.Registrations+"/"), o.To)
	}
	out := e.replayed()
	require.Len(t, out, 10)
	for _, r := range out {
		ref := dlq.Header(r, topics.HeaderReplayedFrom)
		require.True(t, strings.HasPrefix(ref, topic+"/"), ref)
		p, o, err := dlq.ParseID(strings.TrimPrefix(ref, topic+"/"))
		require.NoError(t, err)
		src, err := in.Show(ctx, topic, p, o)
		require.NoError(t, err)
		assert.Equal(t, src.Key, r.Key)
		assert.Equal(t, src.Value, r.Value)
		assert.Equal(t, src.Extra[0].Value, dlq.Header(r, "trace"), "original headers kept")
		assert.Empty(t, dlq.Header(r, topics.HeaderErrorType), "the verdict is not replayed")
		assert.Empty(t, dlq.Header(r, topics.HeaderSourceOffset))
	}

	again, err := rp.Replay(ctx, topic, dlq.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, again.Examined, "a second run replays nothing")
	assert.Len(t, e.replayed(), 10)

	// New letters after the position: only they are considered; a limit stops early.
	e.deadLetter(3, errors.New("WRONGTYPE"), registration)
	lim, err := rp.Replay(ctx, topic, dlq.ReplayOptions{Filter: dlq.Filter{Limit: 2}})
	require.NoError(t, err)
	assert.Equal(t, 2, lim.Replayed)
	assert.True(t, lim.LimitReached)
	rest, err := rp.Replay(ctx, topic, dlq.ReplayOptions{Filter: dlq.Filter{ErrorType: topics.ErrorTypeProcessing}})
	require.NoError(t, err)
	assert.Equal(t, 1, rest.Replayed)
	assert.Len(t, e.replayed(), 13)

	// Reset considers everything again; Force republishes the garbage too.
	all2, err := rp.Replay(ctx, topic, dlq.ReplayOptions{Reset: true, Force: true, DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, 19, all2.Replayed)
}

func indexOf(bad, good []*kgo.Record, e dlq.Entry) int {
	for _, rs := range [][]*kgo.Record{bad, good} {
		for i, r := range rs {
			if r.Partition == e.Verdict.SourcePartition && r.Offset == e.Verdict.SourceOffset {
				return i
			}
		}
	}
	return -1
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"2026-05-01T10:00:00Z": time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC),
		"90m":                  now.Add(-90 * time.Minute),
		"36h":                  now.Add(-36 * time.Hour),
	} {
		got, err := dlq.ParseSince(in, now)
		require.NoError(t, err, in)
		assert.True(t, want.Equal(got), "%s: %v", in, got)
	}
	for _, bad := range []string{"yesterday", "-1h", "0s", "2026-05-01"} {
		_, err := dlq.ParseSince(bad, now)
		assert.ErrorIs(t, err, dlq.ErrBadOptions, bad)
	}
}

// Any value survives the JSON the CLI and the admin API print, byte for byte;
// any <partition>/<offset> that parses prints back the same.
func FuzzEntryJSON(f *testing.F) {
	f.Add([]byte(`{"v":1}`), "0/1")
	f.Add([]byte{0xff, 0, '{'}, "12/0")
	f.Add([]byte("\u2028"), "a/b")
	f.Fuzz(func(t *testing.T, v []byte, id string) {
		b, err := json.Marshal(dlq.Entry{Topic: "x.dlq", Key: []byte("k"), Value: v})
		if err != nil {
			t.Fatal(err)
		}
		var back dlq.Entry
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if string(back.Value) != string(v) {
			t.Fatalf("value %q came back as %q", v, back.Value)
		}
		if p, o, err := dlq.ParseID(id); err == nil {
			printed := (dlq.Entry{Partition: p, Offset: o}).ID()
			if p2, o2, err := dlq.ParseID(printed); err != nil || p2 != p || o2 != o || strings.ContainsAny(id, "+- ") {
				t.Fatalf("%q parsed as %d/%d, prints %q", id, p, o, printed)
			}
		}
	})
}

// Copies of a replay that failed again (a replayed-from header) are never
// republished by an ordinary run. With Reset, the letter itself is sent again
// and its copies passed over; a copy whose letter is gone (retention) stands
// in for it, once.
func TestReplayPassesOverCopiesThatFailedAgain(t *testing.T) {
	e := newEnv(t)
	dlqTopic := topics.DLQ(topics.Registrations)
	letter := e.deadLetter(1, fmt.Errorf("%w: unknown item", topics.ErrInvalid), registration)[0]
	l, err := dlq.NewInspector(e.base()).List(e.ctx(), dlqTopic, dlq.Filter{})
	require.NoError(t, err)
	require.Len(t, l.Entries, 1)
	present := l.Entries[0].Ref()
	gone := dlqTopic + "/0/999999" // a letter retention has removed

	// failedAgain produces the replay of ref (as the replayer does) and
	// dead-letters it again (as the consumer does).
	failedAgain := func(ref string, i int) {
		r := &kgo.Record{Topic: topics.Registrations, Key: letter.Key, Value: registration(4 * i), // item0, as the letter
			Headers: []kgo.RecordHeader{{Key: topics.HeaderReplayedFrom, Value: []byte(ref)}}}
		require.NoError(t, e.cl.ProduceSync(e.ctx(), r).FirstErr())
		require.NoError(t, dlq.NewWriter(e.cl).Send(e.ctx(), dlq.Letter{Record: r, Err: errors.New("still unknown"), Attempts: 1}))
	}
	failedAgain(present, 0)
	failedAgain(gone, 1)
	failedAgain(gone, 2)

	rp := dlq.NewReplayer(e.base())
	rep, err := rp.Replay(e.ctx(), dlqTopic, dlq.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, 1, rep.Replayed, "only the letter")
	assert.Equal(t, 3, rep.FailedAgain, "no copy is sent")
	again, err := rp.Replay(e.ctx(), dlqTopic, dlq.ReplayOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, again.Replayed+again.Examined)

	reset, err := rp.Replay(e.ctx(), dlqTopic, dlq.ReplayOptions{Reset: true})
	require.NoError(t, err)
	assert.Equal(t, 2, reset.Replayed, "the letter, and one copy for the letter that is gone")
	assert.Equal(t, 2, reset.FailedAgain, "the copy of the letter sent, and the second copy of the gone one")
	var sent []string
	for _, o := range reset.Outcomes {
		if o.Action == dlq.ActionReplayed {
			sent = append(sent, o.Entry)
		}
	}
	assert.Equal(t, []string{l.Entries[0].ID()}, sent[:1])
	assert.Len(t, e.replayed(), 3+1+2, "three copies' own replays above, then 1 + 2 by the runs")
}
