package httpapi_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/topics"
)

// lineKeeper does what the consumer and the scheduler's leader do for
// item, while on: each registration record read off the topic is placed in
// the line and a promote runs at once.
func lineKeeper(t *testing.T, s *api, item string, on *atomic.Bool) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers...), kgo.ConsumeTopics(topics.Registrations),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				ev, err := topics.DecodeRegistration(r.Value)
				if err != nil || ev.ItemID != item || !on.Load() {
					return
				}
				q := token.Queue{TokenID: ev.TokenID, ItemID: item, UserID: ev.UserID, Holder: ev.Holder, Partition: r.Partition, Offset: r.Offset}
				if _, err := s.line.Apply(ctx, []queue.Op{{Kind: queue.OpRegister, ItemID: item, TokenID: q.TokenID,
					UserID: q.PlaceKey(), Partition: q.Partition, Offset: q.Offset}}); err != nil && ctx.Err() == nil {
					t.Errorf("apply: %v", err)
				}
				tk, err := s.line.Promote(ctx, item, 1, time.Now(), time.Second)
				if err != nil && ctx.Err() == nil {
					t.Errorf("promote: %v", err)
				}
				// Published, as the scheduler acknowledges it: told from now on.
				if err := s.line.AckPublished(ctx, 1, []string{item}, []int{int(tk.UnpublishedTotal)}); err != nil && ctx.Err() == nil {
					t.Errorf("ack: %v", err)
				}
			})
		}
	}()
}

// An auto registration: refused for an item in another mode; answered
// QUEUED at once while admission is paused; answered with the line's
// admission when the place is admitted within WR_AUTO_WAIT; answered QUEUED
// when the wait ends first. Every exchange is checked against the spec.
func TestAutoRegistration(t *testing.T) {
	easy, held := item("easy"), item("held")
	easy.Mode, held.Mode = topics.ModeAuto, topics.ModeAuto
	held.Policy.Paused = true
	const wait = 400 * time.Millisecond
	s := newAPIWith(t, func(c *httpapi.Config) {
		c.AutoWait = wait
		c.TrustedProxies = []string{"127.0.0.1"}
	}, item("shoe"), easy, held)
	c := newContract(t, s)
	var on atomic.Bool
	on.Store(true)
	lineKeeper(t, s, "easy", &on)

	c.exchange("POST", "/api/v1/items/shoe/registrations", `{"auto":true}`, false, 409, "NOT_AUTO")

	start := time.Now()
	var r httpapi.RegisterResponse
	c.exchange("POST", "/api/v1/items/held/registrations", `{"auto":true}`, false, 202, "").decode(t, &r)
	assert.Equal(t, "QUEUED", r.Status)
	assert.Less(t, time.Since(start), wait, "no room (paused): answered at once")

	c.exchange("POST", "/api/v1/items/easy/registrations", `{"auto":true,"userId":"ann"}`, false, 200, "").decode(t, &r)
	require.Equal(t, "ADMITTED", r.Status)
	require.NotEmpty(t, r.Token)
	q, err := s.signer.ParseQueue(r.Token)
	require.NoError(t, err)
	until, ok, err := s.line.AdmittedUntil(context.Background(), "easy", q.TokenID)
	require.NoError(t, err)
	require.True(t, ok, "the line admitted the place")
	exp, err := time.Parse(time.RFC3339Nano, r.ExpiresAt)
	require.NoError(t, err)
	assert.WithinDuration(t, until, exp, time.Millisecond, "the answer's admission is the line's")
	c.exchange("POST", "/api/v1/admissions/verify", `{"token":"`+r.AdmissionToken+`","itemId":"easy"}`, false, 200, "")

	// Nobody admits: the wait ends and the place waits, QUEUED.
	on.Store(false)
	start = time.Now()
	c.exchange("POST", "/api/v1/items/easy/registrations", `{"auto":true}`, false, 202, "").decode(t, &r)
	assert.Equal(t, "QUEUED", r.Status)
	assert.GreaterOrEqual(t, time.Since(start), wait, "the room had room: it waited for the scheduler")
}
