package httpserver_test

import (
	"testing"

	"github.com/waitroom/waitroom/pkg/web/httpserver"
)

func TestParseTrusted(t *testing.T) {
	got, err := httpserver.ParseTrusted([]string{" 10.0.0.0/8", "127.0.0.1", "::1/128", ""})
	if err != nil || len(got) != 3 || got[0] != "10.0.0.0/8" {
		t.Fatalf("ParseTrusted = %q, %v", got, err)
	}
	if got, err := httpserver.ParseTrusted(nil); err != nil || len(got) != 0 {
		t.Fatalf("none: %q, %v", got, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "localhost", "10.0.0/8"} {
		if _, err := httpserver.ParseTrusted([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
