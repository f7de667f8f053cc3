package registration_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/topics"
)

func TestDrawWindow(t *testing.T) {
	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	opens := topics.ItemState{OpensAt: 100_000}
	random := topics.ItemState{Mode: topics.ModeRandom, DrawWindowSeconds: 10}
	for _, c := range []struct {
		name string
		it   topics.ItemState
		now  int64
		w    int64
		pre  bool
	}{
		{"before the sale", opens, 99_999, 100_000, true},
		{"the sale opened", opens, 100_000, 0, false},
		{"fifo", topics.ItemState{}, 5, 0, false},
		{"random: the window's end, from the epoch", random, 25_000, 30_000, true},
		{"random: a window's start is the next one's", random, 30_000, 40_000, true},
		{"random: default window", topics.ItemState{Mode: topics.ModeRandom}, 1, 60_000, true},
		{"random after a sale: aligned to opensAt", topics.ItemState{Mode: topics.ModeRandom, DrawWindowSeconds: 10, OpensAt: 100_500}, 100_600, 110_500, true},
		{"random before a sale: the opensAt", topics.ItemState{Mode: topics.ModeRandom, OpensAt: 100_500}, 50, 100_500, true},
	} {
		w, pre := registration.DrawWindow(c.it, at(c.now))
		assert.Equal(t, c.w, w, c.name)
		assert.Equal(t, c.pre, pre, c.name)
	}
}

func TestPooledAnswersPreQueue(t *testing.T) {
	for _, s := range []line.State{line.Pooled, line.Late} {
		a := registration.AnswerOf(line.Status{State: s, DrawAt: 5000, InDraw: 7, TokenID: "t"}, registration.Open, time.UnixMilli(1))
		assert.Equal(t, registration.Answer{Status: registration.StatusPreQueue, TokenID: "t", DrawAt: time.UnixMilli(5000), InDraw: 7}, a)
		assert.False(t, a.Final())
		a = registration.AnswerOf(line.Status{State: s}, registration.SoldOut, time.UnixMilli(1))
		assert.Equal(t, registration.StatusSoldOut, a.Status)
	}
	assert.Equal(t, 30*time.Second, registration.PreQueuePollAfter(time.UnixMilli(100_000), time.UnixMilli(0)))
	assert.Equal(t, 2500*time.Millisecond, registration.PreQueuePollAfter(time.UnixMilli(2000), time.UnixMilli(0)))
	assert.Equal(t, time.Second, registration.PreQueuePollAfter(time.UnixMilli(0), time.UnixMilli(9000)))
}
