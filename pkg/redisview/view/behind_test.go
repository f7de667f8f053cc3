package view_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// itemKeys are every key of item's slot a failover could roll back.
func itemKeys(item string) []string {
	k := queue.KeysFor(item)
	return []string{view.ItemKey(item), k.Seq, k.Waiting, k.Admitted, k.Users, k.Head, k.State, k.Applied, k.Epoch,
		k.Pace, k.Paced, k.Unpublished, k.Pool, k.Late, k.Drawn, k.Seen, k.Express, k.Bypass, k.Stats, k.Changes}
}

// dumpItem is item's slot as a replica holds it: DUMP of each key ("" when
// missing).
func dumpItem(t *testing.T, rdb redis.UniversalClient, item string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, key := range itemKeys(item) {
		v, err := rdb.Dump(ctx, key).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("dump %s: %v", key, err)
		}
		out[key] = v
	}
	return out
}

// restoreItem puts item's slot back as dumped: what a replica that was
// behind by the writes since holds once promoted.
func restoreItem(t *testing.T, rdb redis.UniversalClient, dump map[string]string) {
	t.Helper()
	ctx := context.Background()
	for key, v := range dump {
		if err := rdb.Del(ctx, key).Err(); err != nil {
			t.Fatalf("del %s: %v", key, err)
		}
		if v == "" {
			continue
		}
		if err := rdb.Restore(ctx, key, 0, v).Err(); err != nil {
			t.Fatalf("restore %s: %v", key, err)
		}
	}
}

// TestWatcherFindsAnItemBehindByALeaveACompletionOrAnAbandon: a replica
// promoted while behind its master by one leave, one completion, one abandon
// or one state change (a pause) of an item, and nothing else (the seq and
// the head are those the watcher saw), makes that item lost, answered 503
// VIEW_REBUILDING, and only it; the same changes not rolled back are no loss.
func TestWatcherFindsAnItemBehindByALeaveACompletionOrAnAbandon(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	if err := view.SetReady(ctx, rdb, "g1", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	line := queue.New(rdb)
	until := time.Now().Add(time.Hour).UnixMilli()
	items := []string{"left", "completed", "abandoned", "paused", "kept"}
	for _, it := range items {
		if err := view.Register(ctx, rdb, it, "g1"); err != nil {
			t.Fatal(err)
		}
		if _, err := line.ApplyItem(ctx, topics.ItemState{ItemID: it, Version: 1, Name: it}); err != nil {
			t.Fatal(err)
		}
		// Three places; t1 admitted (the head moves to 1).
		_, err := line.Apply(ctx, []queue.Op{
			{Kind: queue.OpRegister, ItemID: it, TokenID: "t1", UserID: "t1", Offset: 1},
			{Kind: queue.OpRegister, ItemID: it, TokenID: "t2", UserID: "t2", Offset: 2},
			{Kind: queue.OpRegister, ItemID: it, TokenID: "t3", UserID: "t3", Offset: 3},
			{Kind: queue.OpAdmit, ItemID: it, Admitted: []string{"t1"}, ExpiresAt: []int64{until}, At: time.Now().UnixMilli()},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	w := view.NewWatcher(rdb, view.Options{}, nil, zap.NewNop())
	if st := w.Check(ctx); !st.Trusted || len(st.Lost) != 0 || len(st.Registry) != len(items) {
		t.Fatalf("healthy: %+v", st)
	}
	seqHead := func(it string) [2]string {
		k := queue.KeysFor(it)
		return [2]string{rdb.Get(ctx, k.Seq).Val(), rdb.Get(ctx, k.Head).Val()}
	}
	before, dumps := map[string][2]string{}, map[string]map[string]string{}
	for _, it := range items {
		before[it], dumps[it] = seqHead(it), dumpItem(t, rdb, it)
	}
	change := map[string]func(it string) error{
		"left": func(it string) error {
			_, err := line.Apply(ctx, []queue.Op{{Kind: queue.OpLeave, ItemID: it, TokenID: "t2", UserID: "t2", Offset: 4}})
			return err
		},
		"completed": func(it string) error {
			ok, err := line.Complete(ctx, it, "t1", "t1") // the api's, at once: no offset
			if err == nil && !ok {
				err = errors.New("t1's admission was not live")
			}
			return err
		},
		"abandoned": func(it string) error {
			_, err := line.Apply(ctx, []queue.Op{{Kind: queue.OpAbandon, ItemID: it, TokenID: "t3", UserID: "t3", Offset: 4}})
			return err
		},
		"paused": func(it string) error {
			ok, err := line.ApplyItem(ctx, topics.ItemState{ItemID: it, Version: 2, Name: it, Policy: topics.AdmissionPolicy{Paused: true}})
			if err == nil && !ok {
				err = errors.New("the pause was not applied")
			}
			return err
		},
		"kept": func(it string) error { // changed, not rolled back
			_, err := line.Apply(ctx, []queue.Op{{Kind: queue.OpLeave, ItemID: it, TokenID: "t2", UserID: "t2", Offset: 4}})
			return err
		},
	}
	for _, it := range items {
		if err := change[it](it); err != nil {
			t.Fatalf("%s: %v", it, err)
		}
		if got := seqHead(it); got != before[it] {
			t.Fatalf("%s: seq and head %v, were %v: the change alone must not move them", it, got, before[it])
		}
	}
	if st := w.Check(ctx); !st.Trusted || len(st.Lost) != 0 {
		t.Fatalf("after the changes, none rolled back: %+v", st.Lost)
	}
	for _, it := range []string{"left", "completed", "abandoned", "paused"} {
		restoreItem(t, rdb, dumps[it]) // the replica promoted was behind by that one change
	}
	st := w.Check(ctx)
	if !st.Trusted {
		t.Fatalf("the view itself stopped being trusted: %+v", st)
	}
	gin.SetMode(gin.TestMode)
	r := gin.New()
	r.GET("/:item", func(c *gin.Context) {
		if view.GateItem(c, w, c.Param("item")) {
			return
		}
		c.String(http.StatusOK, "ok")
	})
	for _, it := range items {
		li, lost := st.Lost[it]
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/"+it, nil))
		if it == "kept" {
			if lost || rec.Code != http.StatusOK {
				t.Errorf("kept: lost %+v, answered %d", li, rec.Code)
			}
			continue
		}
		if !lost || li.State != view.ItemLost || !strings.Contains(li.Reason, "changes") {
			t.Errorf("%s: lost %v %+v, want lost for its changes", it, lost, li)
		}
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), view.Code) {
			t.Errorf("%s: answered %d %s, want 503 %s", it, rec.Code, rec.Body, view.Code)
		}
	}
}
