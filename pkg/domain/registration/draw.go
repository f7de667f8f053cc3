package registration

import (
	"time"

	"github.com/waitroom/waitroom/topics"
)

// DrawWindow is the draw window a registration for it joins at now (unix
// ms), and whether it joins one (it is answered PRE_QUEUE): before the
// sale's opensAt, the opensAt; in random mode, the end of the current window
// of DrawWindowSeconds (topics.DefaultDrawWindowSeconds when 0), windows
// aligned to opensAt (to the unix epoch when there is none); otherwise 0,
// first come, first served.
func DrawWindow(it topics.ItemState, now time.Time) (window int64, pre bool) {
	ms := now.UnixMilli()
	if it.OpensAt > 0 && ms < it.OpensAt {
		return it.OpensAt, true
	}
	if it.ModeOf() != topics.ModeRandom {
		return 0, false
	}
	w := it.DrawWindowSeconds
	if w <= 0 {
		w = topics.DefaultDrawWindowSeconds
	}
	w *= 1000
	origin := max(it.OpensAt, 0)
	return origin + ((ms-origin)/w+1)*w, true
}

// PreQueuePollAfter is how long a PRE_QUEUE registration should wait before
// it reads its status again: until just after the draw, at least a second,
// at most 30 s (the page counts down by itself meanwhile).
func PreQueuePollAfter(drawAt, now time.Time) time.Duration {
	return min(max(drawAt.Sub(now)+500*time.Millisecond, time.Second), 30*time.Second)
}
