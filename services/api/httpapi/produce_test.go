package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

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
	_, _, ok := srv.produce(c, ev)
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
			if _, _, ok := srv.produce(c, ev); ok {
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

// holdingKafka takes every record and, while holding, answers none until
// answer; otherwise it answers at once. It fails the test when it is handed
// a record it still holds: a record given back to the api's pool before its
// promise fired.
type holdingKafka struct {
	t       *testing.T
	mu      sync.Mutex
	holding bool
	held    map[*kgo.Record]heldRecord
	handed  []*kgo.Record // every record, in the order handed over
}

type heldRecord struct {
	key, value []byte
	promise    func(*kgo.Record, error)
}

func (k *holdingKafka) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	k.TryProduce(ctx, r, promise)
}

func (k *holdingKafka) TryProduce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	k.mu.Lock()
	if _, ok := k.held[r]; ok {
		k.t.Errorf("record %p handed over again while its promise is pending", r)
	}
	k.handed = append(k.handed, r)
	if k.holding {
		k.held[r] = heldRecord{key: bytes.Clone(r.Key), value: bytes.Clone(r.Value), promise: promise}
		k.mu.Unlock()
		return
	}
	k.mu.Unlock()
	promise(r, nil)
}

// answer fires r's promise, which was held.
func (k *holdingKafka) answer(r *kgo.Record) {
	k.mu.Lock()
	h := k.held[r]
	delete(k.held, r)
	k.mu.Unlock()
	h.promise(r, nil)
}

// A produce's record, its key and value are pooled: one answered 503 at the
// produce timeout stays the Kafka client's until its promise fires, however
// much later, and the registrations produced meanwhile get other records
// and leave its bytes as they were. Once the promise fired, it is cleared
// and given back.
func TestPooledRecordIsNotReusedBeforeItsPromise(t *testing.T) {
	k := &holdingKafka{t: t, holding: true, held: map[*kgo.Record]heldRecord{}}
	srv := NewServer(nil, k, nil, nil, nil, Options{ProduceTimeout: 50 * time.Millisecond},
		prometheus.NewRegistry(), zaptest.NewLogger(t))
	produce := func(id string) (int, bool) {
		w := httptest.NewRecorder()
		c, _ := gin.CreateTestContext(w)
		c.Request = httptest.NewRequest(http.MethodPost, "/api/v1/items/pool/registrations", nil)
		ev := &topics.RegistrationEvent{V: topics.Version, Kind: topics.KindRegister, ItemID: "pool", TokenID: id,
			UserID: "u-" + id, Holder: topics.HolderToken, RequestedAt: time.Now().UnixMilli()}
		_, _, ok := srv.produce(c, ev)
		return w.Code, ok
	}

	code, ok := produce("LATE")
	require.False(t, ok)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Len(t, k.held, 1)
	late := k.handed[0]
	require.Eventually(t, func() bool {
		srv.waits.mu.Lock()
		defer srv.waits.mu.Unlock()
		return !srv.waits.running
	}, 5*time.Second, time.Millisecond, "the expiring queue let go of the late wait")
	assert.EqualValues(t, 1, (*produceWait)(unsafe.Pointer(late)).refs.Load(), "only the promise holds the late record")

	k.mu.Lock()
	k.holding = false
	k.mu.Unlock()
	var wg sync.WaitGroup
	for g := range 8 { // on every P: a wait pooled on any of them is found
		wg.Go(func() {
			for i := range 50 {
				_, ok := produce(fmt.Sprint("T", g, "-", i))
				assert.True(t, ok)
			}
		})
	}
	wg.Wait()
	k.mu.Lock()
	for _, r := range k.handed[1:] {
		require.NotSame(t, late, r, "a record whose promise is pending was handed over again")
	}
	h := k.held[late]
	k.mu.Unlock()
	assert.Equal(t, h.key, late.Key, "the held record's key is its own")
	assert.Equal(t, h.value, late.Value, "the held record's value is its own")
	assert.Contains(t, string(late.Value), "LATE")

	k.answer(late)
	assert.Nil(t, late.Value, "once its promise fired, the last holder let go: the record is cleared for the pool")
	assert.EqualValues(t, 0, (*produceWait)(unsafe.Pointer(late)).refs.Load())
}

// A tokenId derived from a requestId is the same on every replica and
// version: the SHA-256 of item, userId and requestId joined by NULs, its
// first 16 bytes in unpadded base32.
func TestTokenIDForIsTheHashOfItsParts(t *testing.T) {
	h := sha256.Sum256([]byte("drop\x00u-1\x00req-7"))
	want := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(h[:16])
	assert.Equal(t, want, tokenIDFor("drop", "u-1", "req-7"))
	assert.Len(t, want, 26)
	assert.NotEqual(t, want, tokenIDFor("drop", "u-1", "req-8"))
	long := strings.Repeat("r", 4000) // longer than the stack buffer
	h = sha256.Sum256([]byte("drop\x00u-1\x00" + long))
	assert.Equal(t, base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(h[:16]), tokenIDFor("drop", "u-1", long))
}
