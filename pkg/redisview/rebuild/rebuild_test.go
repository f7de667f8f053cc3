package rebuild_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/bypass"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// world is a line driven the way the services drive it: records go to
// Kafka first, then their ops to Redis through queue.Line with their offsets;
// promotions are published as the scheduler publishes them.
type world struct {
	t    *testing.T
	ctx  context.Context
	rdb  redis.UniversalClient
	kc   *kgo.Client
	line *queue.Line
	base []kgo.Opt
}

func newWorld(t *testing.T) *world {
	seeds := testenv.Kafka(t, 3)
	base := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	kc, err := kgo.NewClient(append(base, kgo.DefaultProduceTopic(topics.Registrations))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	rdb := testenv.Redis(t)
	w := &world{t: t, ctx: context.Background(), rdb: rdb, kc: kc, line: queue.New(rdb), base: base}
	if err := view.SetReady(w.ctx, rdb, "g0", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	return w
}

// rebuildFromScratch empties Redis and rebuilds the view from the topics.
func (w *world) rebuildFromScratch() rebuild.Report {
	w.t.Helper()
	w.rdb.FlushAll(w.ctx)
	rep, err := rebuild.New(w.rdb, w.base, zap.NewNop()).Run(w.ctx, rebuild.Options{Settle: time.Millisecond})
	if err != nil {
		w.t.Fatal(err)
	}
	return rep
}

func (w *world) produce(topic, key string, v any) *kgo.Record {
	w.t.Helper()
	r, err := w.kc.ProduceSync(w.ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: topics.Encode(v)}).First()
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

func (w *world) item(id string, rate float64, ttl int64) {
	s := topics.ItemState{V: 1, ItemID: id, Name: id, Stock: -1, Enabled: true, Version: time.Now().UnixNano(),
		Policy: topics.AdmissionPolicy{RatePerSecond: rate, SessionTTLSeconds: ttl}}
	w.produce(topics.Items, id, &s)
	if _, err := w.line.ApplyItem(w.ctx, s); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) reg(kind, item, user, tok string) {
	w.t.Helper()
	ev := topics.RegistrationEvent{V: 1, Kind: kind, ItemID: item, UserID: user, TokenID: tok, RequestedAt: time.Now().UnixMilli()}
	r := w.produce(topics.Registrations, item, &ev)
	k := map[string]queue.OpKind{topics.KindRegister: queue.OpRegister, topics.KindLeave: queue.OpLeave, topics.KindComplete: queue.OpComplete, topics.KindAbandon: queue.OpAbandon}[kind]
	if w.rdb.Exists(w.ctx, queue.KeysFor(item).State).Val() == 0 {
		k = queue.OpMark // the consumer dead-letters a record of an unknown item
	}
	if kind == topics.KindComplete { // the API completes at once, then publishes
		if _, err := w.line.Complete(w.ctx, item, tok, user); err != nil {
			w.t.Fatal(err)
		}
	}
	if _, err := w.line.Apply(w.ctx, []queue.Op{{Kind: k, ItemID: item, TokenID: tok, UserID: user, Partition: r.Partition, Offset: r.Offset}}); err != nil {
		w.t.Fatal(err)
	}
	w.advance(r)
}

// advance records on the view that r's partition is applied through r, as
// the consumer does after a batch.
func (w *world) advance(r *kgo.Record) {
	w.t.Helper()
	if err := view.Advance(w.ctx, w.rdb, topics.Registrations, r.Partition, r.Offset+1).Err(); err != nil && !errors.Is(err, redis.Nil) {
		w.t.Fatal(err)
	}
}

// promote runs one tick at now under epoch and publishes it like the scheduler.
func (w *world) promote(item string, epoch int64, now time.Time) {
	w.t.Helper()
	tk, err := w.line.Promote(w.ctx, item, epoch, now, time.Second)
	if err != nil {
		w.t.Fatal(err)
	}
	if len(tk.Unpublished) == 0 {
		return
	}
	// As the scheduler publishes: each admission with its expiry and the
	// item's applied offsets when it was decided.
	ev := topics.AdmissionEvent{V: 1, ItemID: item, Admitted: tk.Unpublished, Head: tk.Head, Epoch: epoch, At: now.UnixMilli(),
		Applied: tk.Admits[0].Applied}
	for _, a := range tk.Admits {
		ev.ExpiresAt = append(ev.ExpiresAt, a.ExpiresAt)
	}
	w.produce(topics.Admissions, item, &ev)
	if err := w.line.AckPublished(w.ctx, epoch, []string{item}, []int{len(tk.Unpublished)}); err != nil {
		w.t.Fatal(err)
	}
}

// snapshot is every key of the items that a rebuild must restore exactly.
func (w *world) snapshot(items ...string) map[string]string {
	out := map[string]string{}
	for _, id := range items {
		k := queue.KeysFor(id)
		zs := func(key string) string {
			// Expired admissions are dropped by the next promote; a rebuild drops them at once.
			v, _ := w.rdb.ZRangeByScoreWithScores(w.ctx, key, &redis.ZRangeBy{Min: "(" + strconv.FormatInt(time.Now().UnixMilli(), 10), Max: "+inf"}).Result()
			if key == k.Waiting {
				v, _ = w.rdb.ZRangeWithScores(w.ctx, key, 0, -1).Result()
			}
			return fmt.Sprint(v)
		}
		hash := func(key string) string {
			v, _ := w.rdb.HGetAll(w.ctx, key).Result()
			ks := slices.Sorted(maps.Keys(v))
			s := ""
			for _, x := range ks {
				s += x + "=" + v[x] + " "
			}
			return s
		}
		out[id+" seq"] = w.rdb.Get(w.ctx, k.Seq).Val()
		out[id+" head"] = w.rdb.Get(w.ctx, k.Head).Val()
		out[id+" waiting"] = zs(k.Waiting)
		out[id+" admitted"] = zs(k.Admitted)
		out[id+" users"] = hash(k.Users)
		out[id+" applied"] = hash(k.Applied)
		out[id+" state"] = hash(k.State)
		out[id+" sum60"] = w.rdb.HGet(w.ctx, k.Pace, "sum60").Val()
		out[id+" paced"] = fmt.Sprint(w.rdb.LRange(w.ctx, k.Paced, 0, -1).Val())
		out[id+" pool"] = fmt.Sprint(w.rdb.ZRangeWithScores(w.ctx, k.Pool, 0, -1).Val())
		out[id+" late"] = fmt.Sprint(w.rdb.ZRangeWithScores(w.ctx, k.Late, 0, -1).Val())
		out[id+" drawn"] = hash(k.Drawn)
	}
	out["active"] = fmt.Sprint(slices.Sorted(slices.Values(w.rdb.SMembers(w.ctx, queue.ActiveItems).Val())))
	return out
}

func diff(t *testing.T, want, got map[string]string) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if want[k] != got[k] {
			t.Errorf("%s:\n  before %s\n  after  %s", k, want[k], got[k])
		}
	}
}

// TestRebuildIsExact builds lines with waiting, admitted, expired, left and
// completed people and repeat registrations, wipes Redis, rebuilds, and
// compares every key.
func TestRebuildIsExact(t *testing.T) {
	w := newWorld(t)
	w.item("a", 3, 60)
	w.item("b", 2, 1)
	w.item("idle", 1, 60)
	now := time.Now()
	for i := range 20 {
		w.reg(topics.KindRegister, "a", "u"+strconv.Itoa(i), "ta"+strconv.Itoa(i))
		w.reg(topics.KindRegister, "b", "u"+strconv.Itoa(i), "tb"+strconv.Itoa(i))
	}
	w.reg(topics.KindRegister, "a", "u3", "ta3-again") // duplicate while waiting
	w.reg(topics.KindRegister, "ghost", "u1", "tg1")   // unknown item: marked only
	// b's admissions expire (ttl 1 s); a's last.
	w.promote("a", 5, now.Add(-3*time.Second))
	w.promote("b", 5, now.Add(-3*time.Second))
	w.promote("a", 5, now.Add(-2*time.Second))
	w.promote("b", 5, now.Add(-2*time.Second))
	w.reg(topics.KindLeave, "a", "u0", "ta0")          // an admitted person leaves
	w.reg(topics.KindComplete, "a", "u1", "ta1")       // an admitted person completes
	w.reg(topics.KindLeave, "a", "u10", "ta10")        // a waiting person leaves
	w.reg(topics.KindRegister, "a", "u10", "ta10-2")   // and comes back at the end
	w.reg(topics.KindRegister, "b", "u0", "tb0-2")     // b's u0 expired: a new place
	w.reg(topics.KindRegister, "a", "u2", "ta2-again") // admitted and live: duplicate
	w.reg(topics.KindRegister, "a", "late", "ta-late")

	// A leader took epoch 9 and claimed it, then paused before promoting.
	w.produce(topics.Admissions, topics.EpochClaimItem, &topics.AdmissionEvent{V: 1, Kind: topics.KindEpochClaim,
		ItemID: topics.EpochClaimItem, Admitted: []string{}, Epoch: 9, At: now.UnixMilli()})
	items := []string{"a", "b", "idle", "ghost"}
	before := w.snapshot(items...)
	rep := w.rebuildFromScratch()
	after := w.snapshot(items...)
	diff(t, before, after)
	if rep.Epoch != 10 {
		t.Errorf("fence epoch = %d, want 10 (above the 9 claimed on the record)", rep.Epoch)
	}
	// Leaders from before the wipe (epoch 5 promoted, epoch 9 only claimed)
	// are fenced on every item; a new one (11) admits in order.
	for _, ex := range []int64{5, 9} {
		for _, it := range []string{"a", "b"} {
			if _, err := w.line.Promote(w.ctx, it, ex, time.Now(), time.Second); err != queue.ErrFenced {
				t.Fatalf("ex-leader %d promote of %s = %v, want ErrFenced", ex, it, err)
			}
		}
	}
	if n, _ := w.rdb.Incr(w.ctx, rebuild.EpochKey).Result(); n != 11 {
		t.Fatalf("the next leader takes epoch %d, want 11", n)
	}
	m, ok, err := view.Read(w.ctx, w.rdb)
	if err != nil || !ok || m.State != view.Ready || m.Gen != rep.Gen {
		t.Fatalf("marker after rebuild = %+v %v %v", m, ok, err)
	}
	// Nobody is admitted twice: after the rebuild the next admissions are the
	// next in line, never someone admitted before (expired or not).
	w.promote("b", 11, time.Now().Add(2*time.Second))
	tb, _ := w.rdb.ZRange(w.ctx, queue.KeysFor("b").Admitted, 0, -1).Result()
	for _, tok := range tb {
		if tok == "tb0" || tok == "tb1" || tok == "tb2" || tok == "tb3" {
			t.Errorf("%s admitted a second time after the rebuild", tok)
		}
	}
	if len(tb) == 0 {
		t.Fatal("no admission after the rebuild: the check above proves nothing")
	}
}

// Two consumers both see the view rebuilding; one finishes. The other, whose
// verdict predates that, must not start the next rebuild (UnlessReady), or the
// two replace each other's view for ever. A ready view that is the problem
// (older than the record) is still rebuilt when UnlessReady is off.
func TestRebuildUnlessReadySkipsAFinishedRebuild(t *testing.T) {
	w := newWorld(t)
	w.item("drop", 10, 60)
	w.reg(topics.KindRegister, "drop", "u1", "t1")
	// Redis lost (the view's keys: a FLUSHALL through a cluster client
	// reaches one node only).
	if err := w.rdb.Del(w.ctx, view.MarkerKey, view.AppliedKey).Err(); err != nil {
		t.Fatal(err)
	}
	rb := rebuild.New(w.rdb, w.base, zap.NewNop())
	first, err := rb.Run(w.ctx, rebuild.Options{Settle: time.Millisecond, UnlessReady: true})
	if err != nil {
		t.Fatalf("first rebuild of an empty view: %v", err)
	}
	if _, err := rb.Run(w.ctx, rebuild.Options{Settle: time.Millisecond, UnlessReady: true}); !errors.Is(err, rebuild.ErrNotNeeded) {
		t.Fatalf("second rebuild with UnlessReady: %v, want ErrNotNeeded", err)
	}
	m, ok, err := view.Read(w.ctx, w.rdb)
	if err != nil || !ok || m.Gen != first.Gen || m.State != view.Ready {
		t.Fatalf("marker after a skipped rebuild: %+v %v %v, want generation %s ready", m, ok, err, first.Gen)
	}
	again, err := rb.Run(w.ctx, rebuild.Options{Settle: time.Millisecond})
	if err != nil || again.Gen == first.Gen {
		t.Fatalf("rebuild without UnlessReady: %+v %v, want a new generation", again, err)
	}
}

// regBypass publishes a register that used bypass code (count uses until
// exp) and applies it as the consumer does.
func (w *world) regBypass(item, user, tok, code string, count int64, exp time.Time) {
	w.t.Helper()
	ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, ItemID: item, UserID: user, TokenID: tok, RequestedAt: time.Now().UnixMilli(),
		Bypass: &topics.BypassUse{Code: code, Count: count, ExpiresAt: exp.UnixMilli()}}
	r := w.produce(topics.Registrations, item, &ev)
	op := queue.Op{Kind: queue.OpRegister, ItemID: item, TokenID: tok, UserID: user, Partition: r.Partition, Offset: r.Offset,
		Bypass: &queue.BypassOp{Code: code, Count: bypass.Allowance(&ev)}}
	if _, err := w.line.Apply(w.ctx, []queue.Op{op}); err != nil {
		w.t.Fatal(err)
	}
	w.advance(r)
}

// TestRebuildBypass: express places (waiting and admitted), the codes' use
// counts and a head that excludes express admissions come back exactly.
func TestRebuildBypass(t *testing.T) {
	w := newWorld(t)
	w.item("x", 1, 60)
	now := time.Now()
	for i := range 5 {
		w.reg(topics.KindRegister, "x", "u"+strconv.Itoa(i), "tx"+strconv.Itoa(i))
	}
	w.promote("x", 3, now.Add(-2*time.Second)) // tx0: head 1
	exp := now.Add(time.Hour)
	w.regBypass("x", "s1", "ts1", "code-a", 2, exp)
	w.regBypass("x", "s2", "ts2", "code-a", 2, exp)
	w.regBypass("x", "s3", "ts3", "code-a", 2, exp)    // exhausted
	w.regBypass("x", "s4", "ts4", "code-old", 5, now)  // expired when made
	w.regBypass("x", "u1", "tx1-b", "code-b", 3, exp)  // already waiting: duplicate, no use
	w.promote("x", 3, now.Add(-1900*time.Millisecond)) // ts1, ts2 (express, head stays 1)
	w.regBypass("x", "s5", "ts5", "code-b", 3, exp)    // waits in express
	w.regBypass("x", "s6", "ts6", "code-b", 3, exp)    // leaves before its tick
	w.reg(topics.KindLeave, "x", "s6", "ts6")
	before := w.snapshot("x")
	k := queue.KeysFor("x")
	express := func() string { return fmt.Sprint(w.rdb.ZRangeWithScores(w.ctx, k.Express, 0, -1).Val()) }
	uses := func() string { v := w.rdb.HGetAll(w.ctx, k.Bypass).Val(); return fmt.Sprint(v) }
	// A left express place stays in the set until the next tick drops it;
	// the rebuild writes only the live ones.
	if got := express(); got != "[{8 ts5} {9 ts6}]" {
		t.Fatalf("express before = %s", got)
	}
	beforeUses := uses()
	if beforeUses != "map[code-a:2 code-b:2]" {
		t.Fatalf("uses before = %s", beforeUses)
	}
	if before["x head"] != "1" {
		t.Fatalf("head before = %s, want 1 (express admissions do not move it)", before["x head"])
	}
	w.rebuildFromScratch()
	diff(t, before, w.snapshot("x"))
	if got := express(); got != "[{8 ts5}]" {
		t.Errorf("express after = %s, want [{8 ts5}]", got)
	}
	if got := uses(); got != beforeUses {
		t.Errorf("uses after = %s, want %s", got, beforeUses)
	}
	// The rebuilt line goes on: ts5 at the next tick, though a rebuilt rate
	// budget starts empty (tx1 waits for it), and the head stays.
	tk, err := w.line.Promote(w.ctx, "x", 100, time.Now(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(tk.Unpublished) != "[ts5]" || tk.Head != 1 {
		t.Errorf("first tick after the rebuild: %v head %d, want [ts5] and head 1", tk.Unpublished, tk.Head)
	}
}
