package sse

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func decodeAll(t testing.TB, r io.Reader, maxLine int) ([]Event, error) {
	t.Helper()
	d := NewDecoder(r, maxLine)
	var out []Event
	for {
		ev, err := d.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func TestDecoder(t *testing.T) {
	sec := time.Second
	tests := []struct {
		name string
		in   string
		want []Event
	}{
		{"one event", "event: position\nid: 1\ndata: {\"position\":3}\n\n",
			[]Event{{ID: "1", Name: "position", Data: `{"position":3}`}}},
		{"default name is message", "data: hi\n\n", []Event{{Name: "message", Data: "hi"}}},
		{"multi-line data", "data: a\ndata:b\ndata:  c\n\n", []Event{{Name: "message", Data: "a\nb\n c"}}},
		{"CRLF and lone CR", "event: x\r\ndata: 1\r\rdata: 2\r\n\r\n",
			[]Event{{Name: "x", Data: "1"}, {Name: "message", Data: "2"}}},
		{"comments are skipped", ": heartbeat\n:\ndata: x\n: more\n\n", []Event{{Name: "message", Data: "x"}}},
		{"id carries over", "id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n",
			[]Event{{ID: "7", Name: "message", Data: "a"}, {ID: "7", Name: "message", Data: "b"}, {Name: "message", Data: "c"}}},
		{"id with NUL is ignored", "id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n",
			[]Event{{ID: "1", Name: "message", Data: "a"}, {ID: "1", Name: "message", Data: "b"}}},
		{"retry", "retry: 1000\ndata: a\n\nretry: 1x\ndata: b\n\n",
			[]Event{{Name: "message", Data: "a", Retry: sec}, {Name: "message", Data: "b", Retry: sec}}},
		{"no data, no dispatch; name resets", "event: ping\n\ndata: x\n\n", []Event{{Name: "message", Data: "x"}}},
		{"field without colon", "data\n\n", []Event{{Name: "message", Data: ""}}},
		{"only one leading space goes", "data:  two\n\n", []Event{{Name: "message", Data: " two"}}},
		{"colon in value", "data: a: b\n\n", []Event{{Name: "message", Data: "a: b"}}},
		{"unknown fields ignored", "foo: bar\ndata: x\n\n", []Event{{Name: "message", Data: "x"}}},
		{"BOM at start", "\uFEFFdata: x\n\n", []Event{{Name: "message", Data: "x"}}},
		{"unfinished event dropped", "data: a\n\ndata: b\n", []Event{{Name: "message", Data: "a"}}},
		{"unfinished event without newline dropped", "data: a\n\ndata: b", []Event{{Name: "message", Data: "a"}}},
		{"empty stream", "", nil},
		{"blank lines only", "\n\n\r\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in))} {
				got, err := decodeAll(t, r, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("got %#v\nwant %#v", got, tc.want)
				}
			}
		})
	}
}

func TestDecoderCounts(t *testing.T) {
	d := NewDecoder(strings.NewReader(": hb\n: hb\nretry: 2500\ndata: x\n\n"), 0)
	if _, err := d.Next(); err != nil {
		t.Fatal(err)
	}
	if d.Comments() != 2 || d.Retry() != 2500*time.Millisecond {
		t.Fatalf("comments %d retry %v", d.Comments(), d.Retry())
	}
}

func TestDecoderLineTooLong(t *testing.T) {
	_, err := decodeAll(t, strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 64)
	if !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("err = %v, want ErrLineTooLong", err)
	}
}

func TestDecoderReadError(t *testing.T) {
	boom := errors.New("boom")
	_, err := decodeAll(t, io.MultiReader(strings.NewReader("data: a\n"), iotest.ErrReader(boom)), 0)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

// FuzzDecoder: any input decodes without panicking, and the events do not
// depend on how the bytes arrive.
func FuzzDecoder(f *testing.F) {
	for _, s := range []string{"event: a\nid: 1\ndata: x\n\n", "data: a\r\ndata: b\r\r", ": c\nretry: 10\n\n", "\uFEFFdata\n\n", "id: \x00\ndata:\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		whole, err1 := decodeAll(t, strings.NewReader(in), 4096)
		bytewise, err2 := decodeAll(t, iotest.OneByteReader(strings.NewReader(in)), 4096)
		if (err1 == nil) != (err2 == nil) || !reflect.DeepEqual(whole, bytewise) {
			t.Fatalf("whole %#v (%v) != bytewise %#v (%v)", whole, err1, bytewise, err2)
		}
		for _, ev := range whole {
			if strings.ContainsAny(ev.Name, "\r\n") || strings.ContainsAny(ev.ID, "\r\n\x00") || strings.Contains(ev.Data, "\r") {
				t.Fatalf("line ends leaked into %#v", ev)
			}
		}
	})
}
