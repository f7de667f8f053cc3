package snapshot_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/redisview/snapshot"
	"github.com/waitroom/waitroom/topics"
)

func places(n int, user string) []topics.SnapshotEntry {
	out := make([]topics.SnapshotEntry, n)
	for i := range out {
		out[i] = topics.SnapshotEntry{State: "WAITING", Token: "TOKEN" + strconv.Itoa(i), User: user + strconv.Itoa(i), Num: int64(i + 1)}
	}
	return out
}

// Every chunk record stays under Kafka's 1 MB, even for place keys whose
// JSON is several times their length, and the chunks read back (Latest)
// give the places in order; a head whose chunk is missing is torn.
func TestChunksFitAndReadBack(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int
		user string
	}{{"plain", 30_000, "user-"}, {"escaped", 8_000, strings.Repeat("\x01", 40)}} {
		s := &snapshot.Snapshot{Head: topics.SnapshotHead{V: 1, ItemID: "it", Gen: "g1", Entries: c.n}, Places: places(c.n, c.user)}
		chunks, head := s.Records()
		if len(chunks) < 2 {
			t.Fatalf("%s: %d chunks, want several (the test proves nothing)", c.name, len(chunks))
		}
		l := snapshot.NewLatest()
		for _, r := range chunks {
			if len(r.Value) > 1_000_000 {
				t.Errorf("%s: chunk %s is %d bytes", c.name, r.Key, len(r.Value))
			}
			l.Add(r)
		}
		l.Add(head)
		got, torn := l.Complete(func(string) bool { return true })
		if len(torn) != 0 || got["it"] == nil || len(got["it"].Places) != c.n || got["it"].Places[c.n-1] != s.Places[c.n-1] {
			t.Fatalf("%s: read back %v torn %v", c.name, got["it"], torn)
		}
		l.Add(&kgo.Record{Topic: topics.Snapshots, Key: chunks[1].Key}) // a tombstone: the snapshot is cut
		if got, torn := l.Complete(func(string) bool { return true }); got["it"] != nil || len(torn) != 1 {
			t.Fatalf("%s: with a chunk gone: %v, torn %v; want torn", c.name, got, torn)
		}
	}
}
