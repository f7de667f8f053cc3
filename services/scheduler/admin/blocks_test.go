package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/scheduler/admin"
	"github.com/waitroom/waitroom/topics"
)

// Blocks over the admin API: recorded on waitroom.blocks (what the api
// replicas follow), listed, lifted by a tombstone; bad input is a 400
// naming the problem.
func TestBlockRoutes(t *testing.T) {
	e := newEnv(t, fakes{})
	var b admin.BlockView
	code, ed := e.do(http.MethodPost, admin.Prefix+"/blocks", `{"subject":"user:mallory","reason":"ticket bot"}`, &b)
	require.Equal(t, http.StatusOK, code, ed)
	assert.Equal(t, "user:mallory", b.Subject)
	assert.Zero(t, b.Until)
	code, ed = e.do(http.MethodPost, admin.Prefix+"/blocks", `{"subject":"ip:203.0.113.9/24","reason":"farm","forSeconds":60}`, &b)
	require.Equal(t, http.StatusOK, code, ed)
	assert.Equal(t, "ip:203.0.113.0/24", b.Subject, "masked")
	assert.InDelta(t, time.Now().Add(time.Minute).UnixMilli(), b.Until, 5000)

	for body, msg := range map[string]string{
		`{"subject":"mallory"}`:                                      "user:<userId> or ip:<cidr>",
		`{"subject":"ip:1.2.3.4/33"}`:                                "ip:1.2.3.4/33",
		`{"subject":"user:a","until":1}`:                             "in the past",
		`{"subject":"user:a","until":99999999999999,"forSeconds":5}`: "not both",
		`{"subject":"user:a","forSeconds":-1}`:                       "negative",
		// 18446744073709552 s is 384 ms past 2^64 ms: no block of a moment.
		`{"subject":"user:a","forSeconds":18446744073709552}`: "forSeconds 18446744073709552 is too large",
	} {
		code, ed := e.do(http.MethodPost, admin.Prefix+"/blocks", body, nil)
		assert.Equal(t, http.StatusBadRequest, code, body)
		assert.Equal(t, "INVALID_BLOCK", ed.Code, body)
		assert.Contains(t, ed.Message, msg, body)
	}
	code, ed = e.do(http.MethodPost, admin.Prefix+"/blocks", `{"subject":"user:a","color":1}`, nil)
	assert.Equal(t, http.StatusBadRequest, code, "unknown field: %v", ed)

	var l admin.BlocksResponse
	code, _ = e.do(http.MethodGet, admin.Prefix+"/blocks", "", &l)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, l.Blocks, 2, "listed at once: the route waits for its own list to read the record")
	assert.Equal(t, "ip:203.0.113.0/24", l.Blocks[0].Subject)
	assert.True(t, l.Blocks[0].Active)
	assert.Equal(t, "ticket bot", l.Blocks[1].Reason)

	code, ed = e.do(http.MethodDelete, admin.Prefix+"/blocks?subject=ip:203.0.113.0/24", "", nil)
	require.Equal(t, http.StatusOK, code, ed)
	code, ed = e.do(http.MethodDelete, admin.Prefix+"/blocks?subject=nobody", "", nil)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Equal(t, "INVALID_BLOCK", ed.Code)
	code, _ = e.do(http.MethodGet, admin.Prefix+"/blocks", "", &l)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, l.Blocks, 1)
	assert.Equal(t, "user:mallory", l.Blocks[0].Subject)

	// What the topic holds: the block records and the tombstone, keyed by subject.
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeTopics(topics.Blocks), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var keys []string
	var tomb int
	for len(keys) < 3 {
		fs := cl.PollFetches(e.ctx())
		require.NoError(t, fs.Err())
		fs.EachRecord(func(r *kgo.Record) {
			keys = append(keys, string(r.Key))
			if r.Value == nil {
				tomb++
			} else {
				_, err := topics.DecodeBlock(r.Value)
				assert.NoError(t, err)
			}
		})
	}
	assert.Equal(t, []string{"user:mallory", "ip:203.0.113.0/24", "ip:203.0.113.0/24"}, keys)
	assert.Equal(t, 1, tomb)
}

// The console's operations view: a DLQ record counts as size 1 on its topic,
// a group's lag is its committed offsets behind the end, and the leaders
// come from the scheduler.
func TestOpsView(t *testing.T) {
	leaders := []admin.ShardLeader{{Shard: 0, Replica: "r1", Host: "h1 :1", Self: true}, {Shard: 1}}
	e := newEnv(t, fakes{leaders: func(context.Context) ([]admin.ShardLeader, error) { return leaders, nil }})
	ctx := e.ctx()
	require.NoError(t, e.prod.ProduceSync(ctx, &kgo.Record{Topic: topics.DLQ(topics.Registrations), Key: []byte("x"), Value: []byte("bad")}).FirstErr())
	res := e.prod.ProduceSync(ctx,
		&kgo.Record{Topic: topics.Registrations, Key: []byte("a"), Value: []byte("1")},
		&kgo.Record{Topic: topics.Registrations, Key: []byte("a"), Value: []byte("2")})
	require.NoError(t, res.FirstErr())
	p := res[0].Record.Partition // one key: one partition
	// The group has read everything but those two records.
	adm := kadm.NewClient(e.prod)
	ends, err := adm.ListEndOffsets(ctx, topics.Registrations)
	require.NoError(t, err)
	offs := kadm.Offsets{}
	ends.Each(func(o kadm.ListedOffset) {
		at := o.Offset
		if o.Partition == p {
			at -= 2
		}
		offs.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: at})
	})
	_, err = adm.CommitOffsets(ctx, "waitroom-consumer", offs)
	require.NoError(t, err)

	ck := login(t, e.url)
	snap := firstSnapshot(t, e.url, ck)
	require.NotNil(t, snap.Ops)
	assert.Empty(t, snap.Ops.Errors)
	assert.Equal(t, int64(1), snap.Ops.DLQ[topics.DLQ(topics.Registrations)])
	assert.Equal(t, int64(0), snap.Ops.DLQ[topics.DLQ(topics.Items)])
	require.Len(t, snap.Ops.Lag, 1)
	assert.Equal(t, "waitroom-consumer", snap.Ops.Lag[0].Group)
	assert.Equal(t, int64(2), snap.Ops.Lag[0].Lag)
	assert.Equal(t, leaders, snap.Ops.Shards)
	assert.Equal(t, 1, snap.Ops.Replicas)
}

// firstSnapshot reads the first event of the console's stream.
func firstSnapshot(t *testing.T, url string, ck *http.Cookie) admin.ConsoleSnapshot {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+admin.ConsolePath+"/events", nil)
	req.AddCookie(ck)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	buf := make([]byte, 1<<16)
	var got []byte
	for !json.Valid(trimEvent(got)) {
		n, err := resp.Body.Read(buf)
		require.NoError(t, err)
		got = append(got, buf[:n]...)
	}
	var s admin.ConsoleSnapshot
	require.NoError(t, json.Unmarshal(trimEvent(got), &s))
	return s
}

func trimEvent(b []byte) []byte {
	const pre = "event: snapshot\ndata: "
	if len(b) < len(pre) {
		return nil
	}
	b = b[len(pre):]
	for i := range b {
		if b[i] == '\n' {
			return b[:i]
		}
	}
	return nil
}

// login signs in to the console and returns its session cookie.
func login(t *testing.T, url string) *http.Cookie {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(url+admin.ConsolePath+"/login", map[string][]string{"token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Len(t, resp.Cookies(), 1)
	return resp.Cookies()[0]
}

// An item's view carries the console's counters: the ETA of the last in
// line (registration.ETA at position = waiting), the abandoned count of the
// stats hash (0 when nothing was counted) and rejected only when counted.
func TestItemViewCounters(t *testing.T) {
	e := newEnv(t, fakes{})
	e.seed(topics.ItemState{ItemID: "cnt", Name: "c", Stock: topics.Unlimited, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 2, SessionTTLSeconds: 60}})
	var v admin.ItemView
	code, _ := e.do(http.MethodGet, admin.Prefix+"/items/cnt", "", &v)
	require.Equal(t, http.StatusOK, code)
	assert.Zero(t, v.EtaLastSeconds, "nobody waits")
	assert.Zero(t, v.Abandoned)
	assert.Zero(t, v.Refused)
	assert.Zero(t, v.PreQueued)

	e.register("cnt", 10)
	require.NoError(t, e.rdb.HSet(e.ctx(), queue.KeysFor("cnt").Stats, "abandoned", 3).Err())
	code, _ = e.do(http.MethodGet, admin.Prefix+"/items/cnt", "", &v)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, int64(5), v.EtaLastSeconds, "10 waiting at 2/s")
	assert.Equal(t, int64(3), v.Abandoned)
	require.NoError(t, queue.New(e.rdb).AddRefused(e.ctx(), map[string]map[string]int64{"cnt": {"RATE_LIMITED": 40, "BLOCKED": 2}}))
	code, _ = e.do(http.MethodGet, admin.Prefix+"/items/cnt", "", &v)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, int64(42), v.Refused)
	assert.Equal(t, "BLOCKED 2, RATE_LIMITED 40", v.RefusedBy)

	code, _ = e.do(http.MethodPut, admin.Prefix+"/items/cnt/admission", `{"paused":true}`, nil)
	require.Equal(t, http.StatusOK, code)
	var paused admin.ItemView
	code, _ = e.do(http.MethodGet, admin.Prefix+"/items/cnt", "", &paused)
	require.Equal(t, http.StatusOK, code)
	assert.Zero(t, paused.EtaLastSeconds, "no ETA while paused")
	assert.Equal(t, int64(10), paused.Waiting)
}
