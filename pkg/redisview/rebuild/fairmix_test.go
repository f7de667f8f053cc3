package rebuild_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/topics"
)

// The fairness parts together: a pre-queue with a late one behind it,
// bypass codes used by a pooled user (a duplicate), a late user (a
// duplicate) and a user with no place (express, past the draw), an abandon
// of a pooled place, then the draw. The rebuilt view equals the live one
// before and after the draw.
func TestRebuildReproducesDrawsBypassesAndAbandonsTogether(t *testing.T) {
	w := newWorld(t)
	w.item("m", 0, 60)
	root := draw.Root([]byte("k"), "m", "salt")
	commit := draw.Commit(root, 2)
	seed1, _ := draw.Seed(root, 2, 1)
	const win = int64(5000)
	exp := time.Now().Add(time.Hour)
	for i := range 50 {
		w.pooled("m", "u"+strconv.Itoa(i), "t"+strconv.Itoa(i), win)
	}
	w.reg(topics.KindRegister, "m", "late", "t-late")
	w.regBypass("m", "u3", "t3-b", "code", 5, exp)       // pooled: duplicate
	w.regBypass("m", "late", "t-late-b", "code", 5, exp) // late: duplicate
	w.regBypass("m", "staff", "t-staff", "code", 5, exp) // express at once
	w.reg(topics.KindAbandon, "m", "u9", "t9")
	w.promote("m", 3, time.Now()) // rate 0: only the express place goes in

	rebuilt := func(stage string) {
		t.Helper()
		before := w.snapshot("m")
		w.rebuildFromScratch()
		t.Log(stage)
		diff(t, before, w.snapshot("m"))
	}
	rebuilt("before the draw")
	w.draw("m", win, 1, seed1, commit)
	line, err := w.line.Waiting(w.ctx, "m", 0)
	if err != nil {
		t.Fatal(err)
	}
	// 49 drawn (50 pooled, one abandoned), then the late one; staff went in.
	if len(line) != 49+1 || line[len(line)-1] != "t-late" {
		t.Fatalf("live line after the draw: %d people, last %s", len(line), line[len(line)-1])
	}
	if n := w.rdb.ZScore(w.ctx, "wr:{m}:admitted", "t-staff").Val(); n == 0 {
		t.Fatal("the express place was not admitted at the tick")
	}
	rebuilt("after the draw")
}
