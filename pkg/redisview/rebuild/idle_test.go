package rebuild_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Abandons replay like the consumer applied them: the released places read
// ABANDONED, an abandon that raced an admission changed nothing, the stats
// count is the same, and the derived Seen set holds every waiting place at
// the rebuild's time.
func TestRebuildReplaysAbandons(t *testing.T) {
	w := newWorld(t)
	s := topics.ItemState{V: 1, ItemID: "idle", Name: "idle", Stock: -1, Enabled: true, Version: time.Now().UnixNano(),
		IdleTimeoutSeconds: 120, Policy: topics.AdmissionPolicy{RatePerSecond: 2, SessionTTLSeconds: 60}}
	w.produce(topics.Items, "idle", &s)
	if _, err := w.line.ApplyItem(w.ctx, s); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		w.reg(topics.KindRegister, "idle", "u"+strconv.Itoa(i), "t"+strconv.Itoa(i))
	}
	w.promote("idle", 3, time.Now()) // t0, t1 admitted
	if n := w.rdb.ZCard(w.ctx, queue.KeysFor("idle").Admitted).Val(); n == 0 {
		t.Fatal("nobody admitted: the admitted abandon below proves nothing")
	}
	w.reg(topics.KindAbandon, "idle", "u5", "t5") // released
	w.reg(topics.KindAbandon, "idle", "u0", "t0") // admitted before it was applied: no change
	w.reg(topics.KindAbandon, "idle", "u5", "t5") // a second sweep of it: no change
	w.reg(topics.KindAbandon, "idle", "u7", "t8") // not u7's place: no change
	w.reg(topics.KindRegister, "idle", "u5", "t5-again")
	w.reg(topics.KindAbandon, "idle", "u8", "t8")
	w.reg(topics.KindLeave, "idle", "u8", "t8") // a leave after the abandon: no change

	before := w.snapshot("idle")
	stats := w.rdb.HGetAll(w.ctx, queue.KeysFor("idle").Stats).Val()
	if stats["abandoned"] != "2" {
		t.Fatalf("live stats = %v, want abandoned 2", stats)
	}
	if v := w.rdb.HGet(w.ctx, queue.KeysFor("idle").Users, "u8").Val(); v != "!At8" {
		t.Fatalf("u8 holds %q, want !At8 (ABANDONED)", v)
	}
	w.rdb.FlushAll(w.ctx)
	start := time.Now().UnixMilli()
	if _, err := rebuild.New(w.rdb, w.base, zap.NewNop()).Run(w.ctx, rebuild.Options{Settle: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	diff(t, before, w.snapshot("idle"))
	if got := w.rdb.HGetAll(w.ctx, queue.KeysFor("idle").Stats).Val(); got["abandoned"] != "2" {
		t.Errorf("rebuilt stats = %v, want abandoned 2", got)
	}
	waiting := w.rdb.ZRange(w.ctx, queue.KeysFor("idle").Waiting, 0, -1).Val()
	seen := w.rdb.ZRangeWithScores(w.ctx, queue.KeysFor("idle").Seen, 0, -1).Val()
	var want, got []string
	for _, tok := range waiting {
		user := "u" + tok[1:2]
		want = append(want, queue.SeenMember(tok, user))
	}
	for _, z := range seen {
		got = append(got, z.Member.(string))
		if int64(z.Score) < start {
			t.Errorf("seen %v scored before the rebuild (%d)", z.Member, start)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		t.Errorf("rebuilt seen = %v, want every waiting place %v", got, want)
	}
	if v := w.rdb.HGet(w.ctx, queue.KeysFor("idle").Users, "u8").Val(); v != "!At8" {
		t.Errorf("after the rebuild u8 holds %q, want !At8 (ABANDONED)", v)
	}
}
