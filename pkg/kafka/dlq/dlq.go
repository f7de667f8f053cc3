// Package dlq sends records a consumer cannot process to the source topic's
// dead-letter topic, with headers that say why and where from, so operators
// can list and replay them.
package dlq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
)

// ErrorType returns the error-type header for err: PARSING_ERROR for bytes that
// are no message, VALIDATION_ERROR for a message that breaks the contract,
// PROCESSING_ERROR for anything else.
func ErrorType(err error) string {
	switch {
	case errors.Is(err, topics.ErrMalformed):
		return topics.ErrorTypeParsing
	case errors.Is(err, topics.ErrInvalid):
		return topics.ErrorTypeValidation
	default:
		return topics.ErrorTypeProcessing
	}
}

// Writer produces dead letters with a client the caller owns.
type Writer struct {
	cl  *kgo.Client
	now func() time.Time
}

// NewWriter returns a Writer producing with cl (acks=all, idempotent: the
// franz-go defaults).
func NewWriter(cl *kgo.Client) *Writer { return &Writer{cl: cl, now: time.Now} }

// Letter is one record to dead-letter and why.
type Letter struct {
	Record   *kgo.Record
	Err      error
	Attempts int
}

// Send writes the letters to their DLQ topics and waits for the broker. An
// error means some were not written: the caller must not commit their offsets.
func (w *Writer) Send(ctx context.Context, letters ...Letter) error {
	if len(letters) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, len(letters))
	at := w.now().UTC().Format(time.RFC3339Nano)
	for i, l := range letters {
		r := l.Record
		hs := make([]kgo.RecordHeader, 0, len(r.Headers)+7)
		for _, h := range r.Headers { // keep the original headers, minus an older verdict
			switch h.Key {
			case topics.HeaderErrorType, topics.HeaderError, topics.HeaderSourceTopic, topics.HeaderSourcePartition,
				topics.HeaderSourceOffset, topics.HeaderFailedAt, topics.HeaderAttempts:
				continue
			}
			hs = append(hs, h)
		}
		msg := l.Err.Error()
		if len(msg) > 1024 {
			msg = msg[:1024]
		}
		attempts := max(l.Attempts, 1)
		hs = append(hs,
			kgo.RecordHeader{Key: topics.HeaderErrorType, Value: []byte(ErrorType(l.Err))},
			kgo.RecordHeader{Key: topics.HeaderError, Value: []byte(msg)},
			kgo.RecordHeader{Key: topics.HeaderSourceTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: topics.HeaderSourcePartition, Value: []byte(strconv.FormatInt(int64(r.Partition), 10))},
			kgo.RecordHeader{Key: topics.HeaderSourceOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
			kgo.RecordHeader{Key: topics.HeaderFailedAt, Value: []byte(at)},
			kgo.RecordHeader{Key: topics.HeaderAttempts, Value: []byte(strconv.Itoa(attempts))},
		)
		recs[i] = &kgo.Record{Topic: topics.DLQ(r.Topic), Key: r.Key, Value: r.Value, Headers: hs}
	}
	if err := w.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("write %d dead letters: %w", len(recs), err)
	}
	return nil
}

// Header returns the value of header key on r, or "".
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
