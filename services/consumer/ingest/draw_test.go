package ingest_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/topics"
)

func pooledRecord(item, user string, window int64) *kgo.Record {
	r := register(item, user)
	ev, _ := topics.DecodeRegistration(r.Value)
	ev.Window = window
	r.Value = topics.Encode(&ev)
	return r
}

func drawRecord(item string, window, round int64, seed, commit string) *kgo.Record {
	ev := topics.RegistrationEvent{V: topics.Version, Kind: topics.KindDraw, ItemID: item, RequestedAt: time.Now().UnixMilli(),
		Draw: &topics.Draw{Window: window, Round: round, Seed: seed, Commit: commit}}
	return &kgo.Record{Topic: topics.Registrations, Key: []byte(item), Value: topics.Encode(&ev)}
}

// Through the consumer service: 1,500 pooled registrations, a draw record
// with a forged seed (dead-lettered, nothing moves), late ones, the true draw
// in the middle of a batch, a second copy of it (a second scheduler: a
// no-op) and registrations after it: the line is the pool in the seed's
// order, then the late ones, then the later ones, in record order.
func TestConsumerAppliesADrawBetweenTheRecordsAroundIt(t *testing.T) {
	p := newPipeline(t, 1, "sale", "warm")
	// The consumer rebuilds an empty view from the topics when it starts:
	// let it, so the records below go through the consumer itself.
	p.start()
	p.produce([]*kgo.Record{register("warm", "w")})
	p.waitLines(map[string][]string{"warm": {"tok-w"}})
	const window, n = int64(1_700_000_000_000), 1500
	root := draw.Root([]byte("key"), "sale", "salt")
	commit := draw.Commit(root, 4)
	seed, err := draw.Seed(root, 4, 1)
	require.NoError(t, err)
	wrong, _ := draw.Seed(root, 4, 2)

	var recs []*kgo.Record
	var pool []string
	for i := range n {
		u := fmt.Sprintf("u%04d", i)
		recs = append(recs, pooledRecord("sale", u, window))
		pool = append(pool, "tok-"+u)
	}
	forged := drawRecord("sale", window, 1, wrong, commit)
	recs = append(recs, forged, register("sale", "late1"), register("sale", "late2"),
		drawRecord("sale", window, 1, seed, commit), drawRecord("sale", window, 1, seed, commit),
		register("sale", "after1"), pooledRecord("sale", "after2", window))
	p.produce(recs)

	want := slices.Clone(pool)
	require.NoError(t, draw.Order(seed, want))
	want = append(want, "tok-late1", "tok-late2", "tok-after1", "tok-after2")
	p.waitLines(map[string][]string{"sale": want})
	p.committedToEnd()
	dl := p.deadLetters()
	require.Len(t, dl, 1)
	e, ok := dl[source(forged)]
	require.True(t, ok, "the forged draw is dead-lettered")
	require.Equal(t, topics.ErrorTypeValidation, e.Verdict.ErrorType)
	require.Contains(t, e.Verdict.Error, "does not hash to the commitment")
}
