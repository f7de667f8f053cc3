package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/kafka/blocklist"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/topics"
)

// publish records blocks on waitroom.blocks as the scheduler's admin API
// does (blocklist.Record / Lift are what it publishes).
func (s *api) publish(recs ...*kgo.Record) {
	s.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers...))
	require.NoError(s.t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(s.t, cl.ProduceSync(ctx, recs...).FirstErr())
}

func block(t *testing.T, subject, reason string, until int64) *kgo.Record {
	r, err := blocklist.Record(topics.BlockState{Subject: subject, Reason: reason, Until: until, At: time.Now().UnixMilli()})
	require.NoError(t, err)
	return r
}

func lift(t *testing.T, subject string) *kgo.Record {
	r, err := blocklist.Lift(subject)
	require.NoError(t, err)
	return r
}

// blockedBy asserts a is 403 BLOCKED naming reason.
func blockedBy(t *testing.T, a answer, reason string) {
	t.Helper()
	require.Equal(t, http.StatusForbidden, a.Code, "%s", a.Body)
	var body httpserver.ErrorBody
	a.decode(t, &body)
	assert.Equal(t, "BLOCKED", body.Error.Code)
	assert.Contains(t, body.Error.Message, reason)
}

// A blocked user and a blocked /24 are refused 403 BLOCKED at register,
// others pass; a blocked user's status answers BLOCKED and its admission
// does not verify; lifting lets them in; a block with an end ends; an api
// started later builds the same list from the topic; a malformed record
// blocks nobody and the rest still apply.
func TestBlockedUsersAndRanges(t *testing.T) {
	s := newAPIWith(t, behindFrontDoor, item("drop"))
	// alice queues and is admitted before the block.
	r, q := s.register("drop", "alice")
	s.apply(q)
	s.admit("drop")
	s.ack("drop")
	st := s.status("drop", r.Token)
	require.Equal(t, "ADMITTED", st.Status)
	admission := st.AdmissionToken
	require.Equal(t, http.StatusOK, s.post("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: admission, ItemID: "drop"}).Code, "verified before the block")

	s.publish(
		&kgo.Record{Topic: topics.Blocks, Key: []byte("user:eve"), Value: []byte(`{"v":1,"subject":"user:eve","reason":"no at"}`)},
		block(t, "user:mallory", "ticket bot", 0),
		block(t, "user:alice", "chargebacks", 0),
		block(t, "ip:203.0.113.0/24", "scalper farm", 0),
	)
	require.Eventually(t, func() bool { return s.registerFrom("198.51.100.9", "drop", "mallory").Code == http.StatusForbidden },
		10*time.Second, 20*time.Millisecond, "the api follows the blocks topic")
	blockedBy(t, s.registerFrom("198.51.100.9", "drop", "mallory"), "ticket bot")
	blockedBy(t, s.registerFrom("203.0.113.77", "drop", "bob"), "scalper farm")
	blockedBy(t, s.registerFrom("203.0.113.1", "drop", ""), "scalper farm") // anonymous too
	assert.Equal(t, http.StatusAccepted, s.registerFrom("203.0.114.1", "drop", "carol").Code, "the next /24 passes")
	assert.Equal(t, http.StatusAccepted, s.registerFrom("198.51.100.9", "drop", "eve").Code, "a malformed block blocks nobody")
	assert.Contains(t, string(s.do(http.MethodGet, "/metrics", nil).Body), "waitroom_api_block_records_skipped_total 1", "and is counted")

	st = s.status("drop", r.Token)
	assert.Equal(t, "BLOCKED", st.Status, "a blocked user's status")
	assert.Contains(t, st.Message, "chargebacks")
	assert.Empty(t, st.AdmissionToken)
	// The admission token alice got before the block: verify refuses it.
	blockedBy(t, s.post("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: admission, ItemID: "drop"}), "chargebacks")

	// Lifted: they register again.
	s.publish(lift(t, "user:mallory"), lift(t, "ip:203.0.113.0/24"))
	require.Eventually(t, func() bool { return s.registerFrom("198.51.100.9", "drop", "mallory").Code == http.StatusAccepted },
		10*time.Second, 20*time.Millisecond, "lifting lets mallory in")
	assert.Equal(t, http.StatusAccepted, s.registerFrom("203.0.113.77", "drop", "bob").Code)

	// A block with an end: refused until then, let in after.
	s.publish(block(t, "ip:192.0.2.8", "cool off", time.Now().Add(1500*time.Millisecond).UnixMilli()))
	require.Eventually(t, func() bool { return s.registerFrom("192.0.2.8", "drop", "dave").Code == http.StatusForbidden },
		time.Second, 10*time.Millisecond, "blocked until the end")
	require.Eventually(t, func() bool { return s.registerFrom("192.0.2.8", "drop", "dave").Code == http.StatusAccepted },
		10*time.Second, 50*time.Millisecond, "the block ended by itself")

	// Restart: a new api reads the topic before it is ready.
	s.stop()
	again := s.restart()
	blockedBy(t, again.registerFrom("198.51.100.9", "drop", "alice"), "chargebacks")
	assert.Equal(t, http.StatusAccepted, again.registerFrom("198.51.100.9", "drop", "mallory").Code, "still lifted after the restart")
	assert.Equal(t, http.StatusAccepted, again.registerFrom("203.0.113.5", "drop", "frank").Code)
}

// A block on an address counts the client address WR_TRUSTED_PROXIES lets
// through: X-Forwarded-For from an untrusted peer is ignored, so a client
// cannot name another address to slip a block, nor frame one.
func TestBlockedAddressHonoursTrustedProxies(t *testing.T) {
	s := newAPIWith(t, func(c *httpapi.Config) { c.TrustedProxies = []string{"10.9.9.9/32"} }, item("drop"))
	s.publish(block(t, "ip:127.0.0.0/8", "loopback", 0), block(t, "ip:198.51.100.0/24", "framed", 0))
	require.Eventually(t, func() bool { return s.registerFrom("198.51.100.1", "drop", "x").Code == http.StatusForbidden },
		10*time.Second, 20*time.Millisecond)
	blockedBy(t, s.registerFrom("203.0.113.1", "drop", "y"), "loopback") // the peer's address, not the header's
}

// restart starts another api on the same record (Kafka and Redis) and waits
// until it is ready.
func (s *api) restart() *api {
	s.t.Helper()
	return s.twin(nil)
}
