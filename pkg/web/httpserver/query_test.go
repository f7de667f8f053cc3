package httpserver

import (
	"net/url"
	"testing"
)

func TestQueryValue(t *testing.T) {
	for _, c := range []struct{ q, key, want string }{
		{"", "cursor", ""},
		{"cursor=12.1700000000.abc", "cursor", "12.1700000000.abc"},
		{"a=1&cursor=2&cursor=3", "cursor", "2"},
		{"cursor", "cursor", ""},
		{"cursor=", "cursor", ""},
		{"xcursor=1&cursorx=2", "cursor", ""},
		{"&&cursor=4&", "cursor", "4"},
		{"a=%zz&cursor=5", "cursor", "5"},        // a malformed pair is skipped
		{"curs%6Fr=6", "cursor", "6"},            // an escaped key
		{"cursor=a+b%2Fc", "cursor", "a b/c"},    // an escaped value
		{"a=1;cursor=7&cursor=8", "cursor", "8"}, // a pair with ';' is skipped
		{"token=t1&cursor=9", "token", "t1"},
	} {
		if got := QueryValue(c.q, c.key); got != c.want {
			t.Errorf("QueryValue(%q, %q) = %q, want %q", c.q, c.key, got, c.want)
		}
	}
}

// FuzzQueryValueAgrees holds QueryValue to url.ParseQuery's answer.
func FuzzQueryValueAgrees(f *testing.F) {
	for _, q := range []string{"", "cursor=1.2.x", "a=1&cursor=2", "cursor=%41&cursor=b", "c%75rsor=1", "a;b=1&cursor=3", "cursor+=1", "=&cursor"} {
		f.Add(q, "cursor")
	}
	f.Add("token=abc&cursor=1", "token")
	f.Fuzz(func(t *testing.T, q, key string) {
		v, _ := url.ParseQuery(q)
		if got, want := QueryValue(q, key), v.Get(key); got != want {
			t.Fatalf("QueryValue(%q, %q) = %q, url.ParseQuery's %q", q, key, got, want)
		}
	})
}

// BenchmarkQueryValue is a status poll's query: its cursor.
func BenchmarkQueryValue(b *testing.B) {
	const q = "cursor=1234.1764150000.AbCdEfGhIjKlMnOpQrStUv"
	b.ReportAllocs()
	for b.Loop() {
		if QueryValue(q, "cursor") == "" {
			b.Fatal("no cursor")
		}
	}
}
