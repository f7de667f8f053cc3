package registration_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/domain/registration"
)

// A client that follows pollAfterMs polls at least three times per idle
// timeout wherever it stands in the line; without a timeout nothing changes.
func TestPollAfterIdleStaysUnderAThirdOfTheTimeout(t *testing.T) {
	for _, idle := range []int64{1, 3, 10, 120, 3600} {
		for _, pos := range []int64{1, 500, 5_000, 50_000, 5_000_000} {
			a := registration.Answer{Status: registration.StatusWaiting, Position: pos}
			d := registration.PollAfterIdle(a, idle)
			assert.Positive(t, d)
			assert.Less(t, d, time.Duration(idle)*time.Second/3, "idle %d s, position %d", idle, pos)
			assert.LessOrEqual(t, d, registration.PollAfter(a))
		}
	}
	far := registration.Answer{Status: registration.StatusWaiting, Position: 5_000_000}
	assert.Equal(t, registration.PollAfter(far), registration.PollAfterIdle(far, 0))
	assert.Zero(t, registration.PollAfterIdle(registration.Answer{Status: registration.StatusAbandoned}, 120))
}

func TestAbandonedIsFinal(t *testing.T) {
	a := registration.AnswerOf(line.Status{State: line.Abandoned, TokenID: "t1"}, registration.Open, time.Now())
	assert.Equal(t, registration.Answer{Status: registration.StatusAbandoned, TokenID: "t1"}, a)
	assert.True(t, a.Final())
	// A closed item does not hide why the place ended.
	assert.Equal(t, registration.StatusAbandoned, registration.AnswerOf(line.Status{State: line.Abandoned}, registration.Closed, time.Now()).Status)
}
