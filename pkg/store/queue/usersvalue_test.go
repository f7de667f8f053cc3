package queue_test

import (
	"testing"

	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

func TestUsersValue(t *testing.T) {
	for v, want := range map[string]struct {
		tok   string
		ended line.State
	}{
		"T1": {"T1", ""}, "!LT1": {"T1", line.LeftLine}, "!AT1": {"T1", line.Abandoned}, "!CT1": {"T1", line.Completed},
		"!": {"!", ""}, "!X1": {"!X1", ""}, "": {"", ""},
	} {
		tok, ended := queue.UsersValue(v)
		if tok != want.tok || ended != want.ended {
			t.Errorf("UsersValue(%q) = %q, %q; want %q, %q", v, tok, ended, want.tok, want.ended)
		}
	}
}
