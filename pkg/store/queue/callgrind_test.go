package queue_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// TestCallgrindReplay is bench/replayir.sh's load, not a check: it runs only
// with WR_CALLGRIND_ADDR, a redis-server running under valgrind's callgrind
// (pid WR_CALLGRIND_PID), and replays registrations of one item into it in
// Line.Replay calls of WR_CALLGRIND_BATCH records (named: place key a user,
// with WR_CALLGRIND_NAMED; repeat: the users of the warm-up again with new
// tokens, DUPLICATE, with WR_CALLGRIND_REPEAT), dumping callgrind's counters
// after a warm-up of 40 calls (48 with repeat), after 4 calls and after 44
// more: the script's instructions a record are the third dump's less the
// second's, over 40 calls.
func TestCallgrindReplay(t *testing.T) {
	addr := os.Getenv("WR_CALLGRIND_ADDR")
	if addr == "" {
		t.Skip("bench/replayir.sh's load: needs WR_CALLGRIND_ADDR")
	}
	size, err := strconv.Atoi(os.Getenv("WR_CALLGRIND_BATCH"))
	if err != nil || size <= 0 {
		t.Fatalf("WR_CALLGRIND_BATCH %q: want a positive count", os.Getenv("WR_CALLGRIND_BATCH"))
	}
	named, repeat := os.Getenv("WR_CALLGRIND_NAMED") != "", os.Getenv("WR_CALLGRIND_REPEAT") != ""
	rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1, WriteTimeout: -1})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	l := queue.New(rdb)
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	off, user := int64(0), int64(0)
	calls := func(k int, want queue.Outcome) {
		for range k {
			ops := make([]queue.Op, size)
			for i := range ops {
				tok := fmt.Sprintf("TOKEN%021d", off)
				ops[i] = queue.Op{Kind: queue.OpRegister, ItemID: "big", TokenID: tok, UserID: tok, Partition: 3, Offset: off, At: 1_764_000_000_000}
				if named || repeat {
					ops[i].UserID = fmt.Sprintf("user-%07d", user)
				}
				off, user = off+1, user+1
			}
			res, err := l.Replay(ctx, ops)
			if err != nil {
				t.Fatal(err)
			}
			if got := res[size-1].Outcome; got != want {
				t.Fatalf("the call's last record: %s, want %s", got, want)
			}
		}
	}
	dump := func() {
		if out, err := exec.Command("callgrind_control", "-d", os.Getenv("WR_CALLGRIND_PID")).CombinedOutput(); err != nil {
			t.Fatalf("callgrind_control -d: %v: %s", err, out)
		}
	}
	want := queue.Added
	if repeat {
		calls(48, queue.Added) // every user of the calls below placed
		user, want = 0, queue.Duplicate
	} else {
		calls(40, queue.Added) // a line of some length, the script warm
	}
	dump()
	calls(4, want)
	dump()
	calls(44, want)
	dump()
}
