package sse

import (
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/topics"
)

type itemMap map[string]topics.ItemState

func (m itemMap) Get(id string) (topics.ItemState, bool) { s, ok := m[id]; return s, ok }

// woken tells whether f has a newer snapshot than s: the one its streams
// are woken for.
func woken(f *Feed, s *Snapshot) bool { return f.Latest().Version > s.Version }

func TestHubAppliesEventsOnceAndInOrder(t *testing.T) {
	items := itemMap{"a": {ItemID: "a", Enabled: true, Stock: -1}}
	h := NewHub(items)
	assert.False(t, h.Admission(topics.AdmissionEvent{ItemID: "a", Head: 5, At: 1}), "no streams: skipped")
	f := h.Subscribe("a")
	s0 := f.Latest()
	assert.Equal(t, registration.Open, s0.Verdict)

	require.True(t, h.Admission(topics.AdmissionEvent{ItemID: "a", Head: 5, Waiting: 10, At: 100}))
	assert.True(t, woken(f, s0))
	s1 := f.Latest()
	assert.Equal(t, int64(5), s1.Head)
	assert.Equal(t, uint64(1), s1.Version)

	assert.False(t, h.Admission(topics.AdmissionEvent{ItemID: "a", Head: 3, Waiting: 12, At: 150}), "a late event of a previous leader")
	assert.False(t, h.Admission(topics.AdmissionEvent{ItemID: "a", Head: 5, Waiting: 10, At: 100}), "the same event again")
	assert.False(t, h.Admission(topics.AdmissionEvent{ItemID: "a", Head: 5, Waiting: 10, At: 200}), "a republish that changes nothing")
	assert.False(t, woken(f, s1))
	assert.Equal(t, int64(2), h.Stale())
	assert.True(t, h.Admission(topics.AdmissionEvent{ItemID: "a", Head: 5, Waiting: 14, At: 300}), "more waiting")
	assert.True(t, h.Admission(topics.AdmissionEvent{ItemID: "a", Head: 9, Waiting: 10, At: 400}))
	s3 := f.Latest()
	assert.Equal(t, uint64(3), s3.Version)
	assert.Equal(t, int64(9), s3.Head)

	items["a"] = topics.ItemState{ItemID: "a", Enabled: true, Stock: 0}
	h.RecheckItems()
	assert.True(t, woken(f, s3))
	assert.Equal(t, registration.SoldOut, f.Latest().Verdict)
	delete(items, "a")
	h.RecheckItems()
	assert.Equal(t, registration.Closed, f.Latest().Verdict)

	f2 := h.Subscribe("a")
	assert.Same(t, f, f2, "one feed per item")
	h.Unsubscribe(f)
	assert.Equal(t, 1, h.Items())
	h.Unsubscribe(f2)
	assert.Equal(t, 0, h.Items(), "an item without streams is forgotten")

	beat, g := h.waitBeat(h.beats.slot(), h.beatGen.Load())
	h.Beat()
	select {
	case <-beat:
	case <-time.After(5 * time.Second):
		t.Fatal("the heartbeat did not wake its watchers")
	}
	g.leave()
	h.Stop()
	h.Stop()
	<-h.Stopped()
}

// The streams an admission event admits hear of it first: the item's other
// streams are woken only once they wrote their admitted event.
func TestAdmittedStreamsAreToldFirst(t *testing.T) {
	h := NewHub(nil)
	f := h.Subscribe("it")
	defer h.Unsubscribe(f)
	other := h.Subscribe("it") // a stream that only learns a position
	defer h.Unsubscribe(other)
	snap := other.Latest()
	admit := h.WatchAdmission(f, "tok-1")
	bystander := h.WatchAdmission(f, "tok-9")

	done := make(chan bool)
	go func() {
		done <- h.Admission(topics.AdmissionEvent{ItemID: "it", Admitted: []string{"tok-1", "tok-2"},
			ExpiresAt: []int64{1_900_000_060_000, 1_900_000_060_000}, Head: 2, Waiting: 7, At: 1_900_000_000_000})
	}()
	a := <-admit
	assert.Equal(t, int64(1_900_000_060_000), a.Until.UnixMilli())
	assert.Equal(t, int64(1_900_000_000_000), a.At)
	assert.False(t, woken(other, snap), "the item's other streams were woken before the admitted one wrote")
	a.Done()
	assert.True(t, <-done)
	assert.True(t, woken(other, snap), "now they are")
	assert.Equal(t, int64(2), other.Latest().Head)
	assert.Empty(t, bystander, "a token the event did not admit is not told")

	// Told once: the same event again (at least once delivery) tells nobody.
	h.Admission(topics.AdmissionEvent{ItemID: "it", Admitted: []string{"tok-1"}, ExpiresAt: []int64{1_900_000_060_000}, Head: 2, Waiting: 7, At: 1_900_000_000_000})
	assert.Empty(t, admit)
}

// An event without expiries (written before they existed) tells nobody first:
// the streams find out from the view, as before.
func TestAdmissionWithoutExpiriesTellsNobodyFirst(t *testing.T) {
	h := NewHub(nil)
	f := h.Subscribe("it")
	defer h.Unsubscribe(f)
	admit := h.WatchAdmission(f, "tok-1")
	assert.True(t, h.Admission(topics.AdmissionEvent{ItemID: "it", Admitted: []string{"tok-1"}, Head: 1, At: 1}))
	assert.Empty(t, admit)
	h.UnwatchAdmission(f, "tok-1", admit)
}

// With SetPositionEvery, admission events within the interval wake the
// item's streams once, with the newest state; a verdict change is at once.
func TestAdmissionEventsAreCoalescedForPositions(t *testing.T) {
	items := itemMap{"it": {ItemID: "it", Enabled: true, Stock: topics.Unlimited}}
	h := NewHub(items)
	h.SetPositionEvery(time.Hour)
	f := h.Subscribe("it")
	defer h.Unsubscribe(f)
	first := f.Latest()
	require.True(t, h.Admission(topics.AdmissionEvent{ItemID: "it", Head: 1, Waiting: 9, At: 1}))
	require.True(t, woken(f, first), "the first event since the last publish goes out at once")
	second := f.Latest()
	require.True(t, h.Admission(topics.AdmissionEvent{ItemID: "it", Head: 2, Waiting: 8, At: 2}))
	require.True(t, h.Admission(topics.AdmissionEvent{ItemID: "it", Head: 3, Waiting: 7, At: 3}))
	assert.False(t, h.Admission(topics.AdmissionEvent{ItemID: "it", Head: 2, Waiting: 8, At: 2}), "stale against the held state")
	assert.False(t, woken(f, second), "woken again within the interval")
	items["it"] = topics.ItemState{ItemID: "it", Enabled: false, Stock: topics.Unlimited}
	h.RecheckItems()
	require.True(t, woken(f, second), "a verdict change goes out at once")
	got := f.Latest()
	assert.Equal(t, registration.Closed, got.Verdict)
	assert.Equal(t, int64(3), got.Head, "the held state went out with it")
	assert.Equal(t, int64(7), got.Waiting)
}
