package registration

import (
	"time"

	"github.com/waitroom/waitroom/pkg/domain/line"
)

// Moved answers a waiting registration's status from exact, an exact read
// (queue.Line.Status, which carries the token's seq and the head read with
// it), and now, how the item's line stands since (queue.Line.Motion), without
// reading the registration again: the scheduler admits from the front, so
// every waiting seq is above the head and each seq the head passes was ahead.
// The position is Position's (the notifier's streams tell the same). ok is
// false when the head reached the token's seq (it may be admitted: read it
// exactly) or exact is not a waiting answer with a seq.
func Moved(exact line.Status, now line.Motion) (st line.Status, ok bool) {
	if exact.State != line.Waiting || exact.Seq <= 0 || now.Head >= exact.Seq {
		return line.Status{}, false
	}
	st = exact
	st.Position = Position(exact.Seq, exact.Head, exact.Position, now.Head)
	st.WaitingTotal = max(now.WaitingTotal, st.Position)
	st.AdmittedLastMinute, st.Active, st.PacedSinceMs = now.AdmittedLastMinute, now.Active, now.PacedSinceMs
	st.Head = max(now.Head, exact.Head)
	return st, true
}

// Position is the position, when the item's head is at head, of the waiting
// registration of sequence number seq whose exact position was refPos when
// the head was at refHead: the one rule the api (Moved) and the notifier's
// streams use, so both tell the same place the same position at the same
// moment. The seqs between the head and the registration shrink as the head
// moves; the holes among them at the exact read (span - refPos, where span =
// seq - refHead: places that left, or were never placed) are taken as spread
// evenly, so the answer is ceil((seq - head) × refPos / span).
//
// Error bound: it is exact at refHead, and whenever nobody between the head
// and the registration left (no holes: then it is refPos - (head - refHead)).
// Otherwise it is off by at most the holes in (refHead, seq] at the exact read
// plus the leaves ahead since then, and it never exceeds seq - head (the
// seqs left ahead) nor refPos. A new exact read starts again from zero error.
func Position(seq, refHead, refPos, head int64) int64 {
	if head <= refHead {
		return refPos
	}
	if head >= seq {
		return 1
	}
	span := seq - refHead // >= refPos
	return max(1, ((seq-head)*refPos+span-1)/span)
}

// PollAfter is how long a client should wait before it reads a status again:
// soon near the front, rarely far back (a million people polling every
// second would be a million reads a second). Answers that can no longer
// change get 0 (no more polling).
func PollAfter(a Answer) time.Duration {
	switch a.Status {
	case StatusPending:
		return 500 * time.Millisecond
	case StatusWaiting:
	default:
		return 0
	}
	switch p := a.Position; {
	case p <= 100:
		return time.Second
	case p <= 1_000:
		return 2 * time.Second
	case p <= 10_000:
		return 5 * time.Second
	case p <= 100_000:
		return 15 * time.Second
	default:
		return 30 * time.Second
	}
}

// PollAfterIdle is PollAfter for an item that releases places idle for
// idleTimeoutSeconds (0: never): at most a quarter of the timeout (and at
// least 100 ms), below a third of it, so a client that follows pollAfterMs
// is seen several times per timeout and never loses its place.
func PollAfterIdle(a Answer, idleTimeoutSeconds int64) time.Duration {
	return CapForIdle(PollAfter(a), idleTimeoutSeconds)
}

// CapForIdle bounds a poll interval d for an item that releases places idle
// for idleTimeoutSeconds (0: off): at most a quarter of it (at least 100 ms),
// so a client following the advice is never released.
func CapForIdle(d time.Duration, idleTimeoutSeconds int64) time.Duration {
	if d <= 0 || idleTimeoutSeconds <= 0 {
		return d
	}
	return min(d, max(time.Duration(idleTimeoutSeconds)*time.Second/4, 100*time.Millisecond))
}
