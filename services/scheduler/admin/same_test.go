package admin

import (
	"testing"

	"github.com/waitroom/waitroom/topics"
)

// An explicit fifo reads back from Redis as the default mode: not a conflict.
func TestSameStateTakesFIFOAsTheDefault(t *testing.T) {
	a := topics.ItemState{ItemID: "i", Version: 3, Mode: topics.ModeFIFO}
	b := a
	b.Mode = ""
	if !sameState(a, b) {
		t.Fatal("fifo and the default differ")
	}
	b.Mode = topics.ModeReject
	if sameState(a, b) {
		t.Fatal("fifo and reject are the same")
	}
}
