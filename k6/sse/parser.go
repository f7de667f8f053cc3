package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"
)

// Event is one dispatched Server-Sent Event.
type Event struct {
	ID    string // the last event ID at dispatch (it carries over between events, as in a browser)
	Name  string // the event type; "message" when the stream named none
	Data  string // the data lines joined by "\n"
	Retry time.Duration
}

// ErrLineTooLong is returned when one line of the stream exceeds the decoder's limit.
var ErrLineTooLong = errors.New("sse: line too long")

// Decoder reads events from a text/event-stream body, following the
// WHATWG parsing rules: lines end in CRLF, LF or CR; a line starting with ':'
// is a comment; "field: value" loses one leading space of its value; a blank
// line dispatches the event; an event without data is not dispatched; an
// unfinished event at the end of the stream is dropped.
type Decoder struct {
	sc       *bufio.Scanner
	lastID   string
	retry    time.Duration
	comments int
	first    bool
}

// NewDecoder returns a Decoder over r whose lines may be at most maxLine bytes
// (1 MiB when maxLine <= 0). It buffers up to maxLine bytes.
func NewDecoder(r io.Reader, maxLine int) *Decoder {
	if maxLine <= 0 {
		maxLine = 1 << 20
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(maxLine, 4096)), maxLine)
	sc.Split(scanLines)
	return &Decoder{sc: sc, first: true}
}

// Comments is how many comment lines (heartbeats) were read so far.
func (d *Decoder) Comments() int { return d.comments }

// Retry is the last reconnection time the stream asked for (0 if none).
func (d *Decoder) Retry() time.Duration { return d.retry }

// Next returns the next event. It returns io.EOF when the stream ends, with
// any unfinished event dropped, or the reader's error.
func (d *Decoder) Next() (Event, error) {
	var (
		name    string
		data    strings.Builder
		hasData bool
	)
	for d.sc.Scan() {
		line := d.sc.Bytes()
		if d.first {
			line = bytes.TrimPrefix(line, []byte("\uFEFF"))
			d.first = false
		}
		if len(line) == 0 {
			if !hasData {
				name = "" // nothing to dispatch: the spec resets the buffers
				continue
			}
			if name == "" {
				name = "message"
			}
			return Event{ID: d.lastID, Name: name, Data: data.String(), Retry: d.retry}, nil
		}
		if line[0] == ':' {
			d.comments++
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				d.lastID = string(value)
			}
		case "retry":
			if ms, err := strconv.ParseUint(string(value), 10, 31); err == nil {
				d.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
	if err := d.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Event{}, ErrLineTooLong
		}
		return Event{}, err
	}
	return Event{}, io.EOF
}

// scanLines splits on CRLF, LF or a lone CR. A CR at the end of the buffer
// waits for more input so a CRLF split across reads is one line end.
func scanLines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		if i+1 < len(data) {
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
		if atEOF {
			return i + 1, data[:i], nil
		}
		return 0, nil, nil // a CR last: is a LF next?
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}
