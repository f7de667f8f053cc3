package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

// What the redis-oom step relies on, on a real redis-server with its memory
// full (maxmemory below the memory in use, policy noeviction): a script is
// refused at its first write that may grow memory, having written nothing,
// and never after a first write (Redis cannot undo one, so it lets the
// script finish); a MULTI is refused whole; the refusal reads as trouble
// with Redis, not with the record (queue.IsRecordError), so the consumer
// pauses and retries the batch instead of dead-lettering registrations.
// The line's scripts run in this mode: they declare no flags (#!lua).
func TestAFullRedisRefusesAScriptBeforeItsFirstWriteNeverAfter(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	rdb := srv.Client()
	if err := rdb.Set(ctx, "before", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Fill()

	// Read, then write: refused at the write, nothing written.
	err := redis.NewScript(`redis.call('GET', 'before'); redis.call('SET', 'a', '1'); redis.call('SET', 'b', '1'); return 1`).Run(ctx, rdb, []string{"before", "a", "b"}).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("a writing script on a full Redis: %v, want an OOM refusal", err)
	}
	if queue.IsRecordError(err) {
		t.Fatalf("%q read as a record's fault: the consumer would dead-letter registrations on a full Redis", err)
	}
	if n := rdb.Exists(ctx, "a", "b").Val(); n != 0 {
		t.Fatalf("a script refused on OOM wrote %d keys", n)
	}

	// A first write that frees memory (DEL) is let through, and then the
	// script runs to its end: Redis does not stop a script that wrote.
	if err := redis.NewScript(`redis.call('DEL', 'before'); redis.call('SET', 'a', '1'); redis.call('SET', 'b', '1'); return 1`).Run(ctx, rdb, []string{"before", "a", "b"}).Err(); err != nil {
		t.Fatalf("a script stopped after its first write: %v", err)
	}
	if n := rdb.Exists(ctx, "a", "b").Val(); n != 2 {
		t.Fatalf("a script let through wrote %d of its 2 keys", n)
	}

	// MULTI: refused whole.
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, "a")
		p.Set(ctx, "c", "1", 0)
		return nil
	})
	if err == nil {
		t.Fatal("a MULTI with a write on a full Redis went through")
	}
	if n := rdb.Exists(ctx, "a", "c").Val(); n != 1 {
		t.Fatalf("a refused MULTI changed the keys (%d of a, c exist; want a alone)", n)
	}

	// The line's scripts declare no flags: the rules above are theirs.
	files, err := filepath.Glob("../../../pkg/store/queue/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("the line's scripts: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(string(src), "#!") {
			t.Fatalf("%s declares flags: with them Redis judges a full memory differently (see above)", f)
		}
	}
}
