package dlq

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
)

// Entry is one dead letter as an operator sees it: where it sits in the DLQ,
// the verdict its headers carry, and the original record.
type Entry struct {
	Topic     string    // the DLQ topic
	Partition int32     // in the DLQ topic
	Offset    int64     // in the DLQ topic
	WrittenAt time.Time // the DLQ record's timestamp
	Key       []byte
	Verdict   Verdict
	// Extra are the original record's own headers, kept through the DLQ.
	Extra []KV
	Value []byte
}

// Verdict is what the DLQ headers say: why the record was dead-lettered and
// where it came from. A header that is missing or unreadable leaves its field
// zero.
type Verdict struct {
	ErrorType       string    `json:"errorType"`
	Error           string    `json:"error"`
	SourceTopic     string    `json:"sourceTopic"`
	SourcePartition int32     `json:"sourcePartition"`
	SourceOffset    int64     `json:"sourceOffset"`
	FailedAt        time.Time `json:"failedAt"`
	Attempts        int       `json:"attempts"`
	// ReplayedFrom is "<dlq topic>/<partition>/<offset>" when the record failed
	// again after a replay of that dead letter.
	ReplayedFrom string `json:"replayedFrom,omitempty"`
}

// KV is one record header.
type KV struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Source returns "<topic>/<partition>/<offset>" of the original record.
func (v Verdict) Source() string {
	return v.SourceTopic + "/" + strconv.Itoa(int(v.SourcePartition)) + "/" + strconv.FormatInt(v.SourceOffset, 10)
}

// ID returns "<partition>/<offset>", the name `dlq show` takes.
func (e Entry) ID() string {
	return strconv.Itoa(int(e.Partition)) + "/" + strconv.FormatInt(e.Offset, 10)
}

// Ref returns "<dlq topic>/<partition>/<offset>", the replayed-from header of
// a replay of e.
func (e Entry) Ref() string { return e.Topic + "/" + e.ID() }

// verdictHeaders are the headers the DLQ writes; a replay drops them.
var verdictHeaders = map[string]bool{
	topics.HeaderErrorType: true, topics.HeaderError: true, topics.HeaderSourceTopic: true,
	topics.HeaderSourcePartition: true, topics.HeaderSourceOffset: true, topics.HeaderFailedAt: true,
	topics.HeaderAttempts: true, topics.HeaderReplayedFrom: true,
}

// EntryOf parses a record read from a DLQ topic.
func EntryOf(r *kgo.Record) Entry {
	e := Entry{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, WrittenAt: r.Timestamp.UTC(), Key: r.Key, Value: r.Value}
	v := &e.Verdict
	for _, h := range r.Headers {
		s := string(h.Value)
		switch h.Key {
		case topics.HeaderErrorType:
			v.ErrorType = s
		case topics.HeaderError:
			v.Error = s
		case topics.HeaderSourceTopic:
			v.SourceTopic = s
		case topics.HeaderSourcePartition:
			p, _ := strconv.ParseInt(s, 10, 32)
			v.SourcePartition = int32(p)
		case topics.HeaderSourceOffset:
			v.SourceOffset, _ = strconv.ParseInt(s, 10, 64)
		case topics.HeaderFailedAt:
			v.FailedAt, _ = time.Parse(time.RFC3339Nano, s)
		case topics.HeaderAttempts:
			v.Attempts, _ = strconv.Atoi(s)
		case topics.HeaderReplayedFrom:
			v.ReplayedFrom = s
		default:
			e.Extra = append(e.Extra, KV{Key: h.Key, Value: s})
		}
	}
	return e
}

// entryJSON is Entry on the wire. The value is text when it is valid UTF-8
// (every JSON message is) and base64 otherwise, so garbage survives intact.
type entryJSON struct {
	Topic         string    `json:"topic"`
	Partition     int32     `json:"partition"`
	Offset        int64     `json:"offset"`
	WrittenAt     time.Time `json:"writtenAt"`
	Key           string    `json:"key"`
	Headers       Verdict   `json:"headers"`
	Extra         []KV      `json:"extraHeaders"`
	Value         string    `json:"value"`
	ValueEncoding string    `json:"valueEncoding"` // "utf8" or "base64"
}

// MarshalJSON renders the entry for `-o json` and the admin API.
func (e Entry) MarshalJSON() ([]byte, error) {
	w := entryJSON{Topic: e.Topic, Partition: e.Partition, Offset: e.Offset, WrittenAt: e.WrittenAt,
		Key: string(e.Key), Headers: e.Verdict, Extra: e.Extra, Value: string(e.Value), ValueEncoding: "utf8"}
	if w.Extra == nil {
		w.Extra = []KV{}
	}
	if !utf8.Valid(e.Value) {
		w.Value, w.ValueEncoding = base64.StdEncoding.EncodeToString(e.Value), "base64"
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var w entryJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = Entry{Topic: w.Topic, Partition: w.Partition, Offset: w.Offset, WrittenAt: w.WrittenAt,
		Key: []byte(w.Key), Verdict: w.Headers, Extra: w.Extra, Value: []byte(w.Value)}
	if w.ValueEncoding == "base64" {
		v, err := base64.StdEncoding.DecodeString(w.Value)
		if err != nil {
			return fmt.Errorf("entry %s value: %w", e.ID(), err)
		}
		e.Value = v
	}
	return nil
}

// ParseID parses "<partition>/<offset>".
func ParseID(s string) (partition int32, offset int64, err error) {
	ps, os, ok := strings.Cut(s, "/")
	p, perr := strconv.ParseInt(ps, 10, 32)
	o, oerr := strconv.ParseInt(os, 10, 64)
	if !ok || perr != nil || oerr != nil || !digits(ps) || !digits(os) {
		return 0, 0, fmt.Errorf("%q is not <partition>/<offset> (for example 0/42)", s)
	}
	return int32(p), o, nil
}

func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// Topic returns the DLQ topic an operator means by name: a short source name
// (registrations, items, admissions), a source topic (waitroom.items) or a
// DLQ topic (waitroom.items.dlq).
func Topic(name string) (string, error) {
	sources := []string{topics.Registrations, topics.Items, topics.Admissions}
	for _, src := range sources {
		if name == src || name == strings.TrimPrefix(src, "waitroom.") {
			return topics.DLQ(src), nil
		}
		if name == topics.DLQ(src) {
			return name, nil
		}
	}
	if strings.HasSuffix(name, ".dlq") && len(name) > len(".dlq") {
		return name, nil // a DLQ outside the contract: read it all the same
	}
	return "", fmt.Errorf("%q is not a DLQ: use registrations, items, admissions or a full topic name ending in .dlq", name)
}

// SourceOf returns the source topic of a DLQ topic.
func SourceOf(dlqTopic string) string { return strings.TrimSuffix(dlqTopic, ".dlq") }

// ErrorTypes are the values of the error-type header.
var ErrorTypes = []string{topics.ErrorTypeParsing, topics.ErrorTypeValidation, topics.ErrorTypeProcessing}

// ParseSince reads a --since value: an RFC 3339 time (2026-05-01T10:00:00Z)
// or a duration back from now (90m, 2h, 36h). "" is the zero time: no bound.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%w: since %q: want an RFC 3339 time (2026-05-01T10:00:00Z) or a positive duration (90m, 2h)", ErrBadOptions, s)
	}
	return now.Add(-d), nil
}
