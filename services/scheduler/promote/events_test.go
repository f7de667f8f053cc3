package promote

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// A page of admissions from two ticks goes out as one event per tick, each
// with its own decision point; an entry written before expiries were kept
// makes its event go without them.
func TestAdmissionEventsOnePerDecisionPoint(t *testing.T) {
	a, b := map[int32]int64{0: 4}, map[int32]int64{0: 9}
	page := []queue.Admit{
		{Token: "t1", ExpiresAt: 100, Applied: a}, {Token: "t2", ExpiresAt: 100, Applied: map[int32]int64{0: 4}},
		{Token: "t3", ExpiresAt: 200, Applied: b},
		{Token: "t4"},
	}
	evs := admissionEvents(topics.AdmissionEvent{V: 1, ItemID: "i", Epoch: 3, At: 7}, page, topics.MaxAdmissionEventBytes)
	assert.Equal(t, []topics.AdmissionEvent{
		{V: 1, ItemID: "i", Epoch: 3, At: 7, Admitted: []string{"t1", "t2"}, ExpiresAt: []int64{100, 100}, Applied: a},
		{V: 1, ItemID: "i", Epoch: 3, At: 7, Admitted: []string{"t3"}, ExpiresAt: []int64{200}, Applied: b},
		{V: 1, ItemID: "i", Epoch: 3, At: 7, Admitted: []string{"t4"}},
	}, evs)
	empty := admissionEvents(topics.AdmissionEvent{V: 1, ItemID: "i"}, nil, topics.MaxAdmissionEventBytes)
	assert.Equal(t, []topics.AdmissionEvent{{V: 1, ItemID: "i", Admitted: []string{}}}, empty)
}
