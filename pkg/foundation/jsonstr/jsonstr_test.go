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
