package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// lateKafka writes every record and answers late, as a broker behind a link
// that holds its answers does: the record is on its way (in flight), so the
// Kafka client cannot fail it when the caller's context ends.
type lateKafka struct {
	cl   *kgo.Client
	late time.Duration
}

func (k lateKafka) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	k.cl.Produce(context.WithoutCancel(ctx), r, func(r *kgo.Record, err error) {
		time.Sleep(k.late)
		promise(r, err)
	})
}

func (k lateKafka) TryProduce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	k.cl.TryProduce(context.WithoutCancel(ctx), r, func(r *kgo.Record, err error) {
		time.Sleep(k.late)
		promise(r, err)
	})
}

// ProduceSync is the same broker for a caller that waits in ProduceSync.
func (k lateKafka) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	res := k.cl.ProduceSync(context.WithoutCancel(ctx), rs...)
	time.Sleep(k.late)
	return res
}

// A registration whose record Kafka does not answer within the produce
// timeout is answered 503 at the timeout, not when the broker finally
// answers: the nemesis's probes of an api cut from Kafka (a link that holds)
// waited more than twice the timeout (RELIABILITY.md). The record is still
// written: a retry with the same requestId names the same place.
func TestRegistrationAnswers503AtTheProduceTimeout(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.Kafka(t, 3)...), kgo.ProducerLinger(0))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	timeout := 300 * time.Millisecond
	srv := NewServer(nil, lateKafka{cl: cl, late: 10 * timeout}, nil, nil, nil, Options{ProduceTimeout: timeout},
		prometheus.NewRegistry(), zaptest.NewLogger(t))

	w := httptest.NewRecorder()
	c, _ := gin.CreateTestContext(w)
	c.Request = httptest.NewRequest(http.MethodPost, "/api/v1/items/late/registrations", nil)
	ev := &topics.RegistrationEvent{V: topics.Version, Kind: topics.KindRegister, ItemID: "late", TokenID: "T", UserID: "u",
		Holder: topics.HolderToken, RequestedAt: time.Now().UnixMilli()}
	start := time.Now()
	_, ok := srv.produce(c, ev)
	took := time.Since(start)
	require.False(t, ok, "no answer from Kafka in time is a failure")
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Less(t, took, 3*timeout, "answered at the produce timeout (%s), not when Kafka answered (%s)", timeout, 10*timeout)
}

// A registration that finds the Kafka client's buffer full waits for room
// (within the produce timeout) rather than failing: TryProduce's
// kgo.ErrMaxBuffered sends it to Produce. With room for one record, most of
// these concurrent produces find the buffer full.
func TestProduceWaitsForRoomWhenTheBufferIsFull(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.Kafka(t, 1)...), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	srv := NewServer(nil, cl, nil, nil, nil, Options{ProduceTimeout: 10 * time.Second},
		prometheus.NewRegistry(), zaptest.NewLogger(t))

	const n = 40
	codes := make(chan int, n)
	for i := range n {
		go func() {
			w := httptest.NewRecorder()
			c, _ := gin.CreateTestContext(w)
			c.Request = httptest.NewRequest(http.MethodPost, "/api/v1/items/full/registrations", nil)
			ev := &topics.RegistrationEvent{V: topics.Version, Kind: topics.KindRegister, ItemID: "full", TokenID: fmt.Sprint("T", i),
				UserID: "u", Holder: topics.HolderToken, RequestedAt: time.Now().UnixMilli()}
			if _, ok := srv.produce(c, ev); ok {
				codes <- http.StatusAccepted
				return
			}
			codes <- w.Code
		}()
	}
	for range n {
		assert.Equal(t, http.StatusAccepted, <-codes)
	}
}

// A registration's body is read into a pooled buffer: up to MaxBodyBytes it
// is read whole, one byte more is refused as http.MaxBytesReader refuses it
// (a *http.MaxBytesError, and the connection closed after the answer).
func TestReadBodyTakesTheLimitAndRefusesOneByteMore(t *testing.T) {
	srv := NewServer(nil, nil, nil, nil, nil, Options{MaxBodyBytes: 3000}, prometheus.NewRegistry(), zaptest.NewLogger(t))
	for _, n := range []int{0, 1, 1023, 1024, 1025, 2999, 3000, 3001, 9000} {
		w := httptest.NewRecorder()
		c, _ := gin.CreateTestContext(w)
		body := strings.Repeat("b", n)
		c.Request = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		buf, err := srv.readBody(c)
		if n <= 3000 {
			require.NoError(t, err, n)
			assert.Equal(t, body, string(*buf), n)
			continue
		}
		var mbe *http.MaxBytesError
		require.ErrorAs(t, err, &mbe, n)
		assert.EqualValues(t, 3000, mbe.Limit)
	}
}
