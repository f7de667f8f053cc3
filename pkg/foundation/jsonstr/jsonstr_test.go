package jsonstr

import (
	"encoding/json"
	"testing"
)

func TestAppendIsEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain-ID_42", `q"uote`, `back\slash`, "<html>&", "tab\tnew\nline", "é", "\xff\xfe", "\u2028"} {
		want, _ := json.Marshal(s)
		if got := Append(nil, s); string(got) != string(want) {
			t.Errorf("%q: %s, want %s", s, got, want)
		}
	}
}

func FuzzAppendIsEncodingJSON(f *testing.F) {
	f.Add("a\"b<c>\x00")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := Append([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("%q: %s, want %s", s, got, want)
		}
	})
}

// TestAppendFindsEveryEscapeInAWord puts each byte that encoding/json
// escapes or replaces at each place of a 24-byte string, so the eight-byte
// steps of plainPrefix meet it in every lane.
func TestAppendFindsEveryEscapeInAWord(t *testing.T) {
	for _, c := range []byte{0x00, 0x1f, '"', '\\', '<', '>', '&', 0x7f, 0x80, 0xff} {
		for at := 0; at < 24; at++ {
			b := []byte("abcdefghijklmnopqrstuvwx")
			b[at] = c
			want, _ := json.Marshal(string(b))
			if got := Append(nil, string(b)); string(got) != string(want) {
				t.Errorf("%#x at %d: %s, want %s", c, at, got, want)
			}
		}
	}
}
