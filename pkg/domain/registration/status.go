package registration

import (
	"time"

	"github.com/waitroom/waitroom/pkg/domain/line"
)

// Statuses a client sees, in every transport (the api's "status", the
// notifier's events and their "status").
const (
	StatusQueued    = "QUEUED" // the answer to a registration the broker took
	StatusPending   = "PENDING"
	StatusWaiting   = "WAITING"
	StatusAdmitted  = "ADMITTED"
	StatusExpired   = "EXPIRED"
	StatusCompleted = "COMPLETED"
	StatusLeft      = "LEFT"
	StatusSoldOut   = "SOLD_OUT"
	StatusClosed    = "CLOSED"
	StatusRejected  = "REJECTED"
	// StatusPreQueue: registered for a draw that has not happened yet
	// (before the sale's opensAt, or in a random-mode window).
	StatusPreQueue = "PRE_QUEUE"
	// StatusAbandoned: the place was released after the item's idleTimeout
	// without a poll or a stream.
	StatusAbandoned = "ABANDONED"
	// StatusBlocked: an operator blocked the user or the address.
	StatusBlocked = "BLOCKED"
	// StatusDuplicate: another token of the same proven user holds the
	// place; this token never reads it (its holder may resume it: see
	// line.Duplicated).
	StatusDuplicate = "DUPLICATE"
)

// Answer is what a line status means for the client holding the token.
type Answer struct {
	Status string
	// TokenID is the token the line answered for (the queue token's own).
	TokenID string
	// Position and WaitingTotal while WAITING.
	Position, WaitingTotal int64
	// ExpiresAt is when the admission ends (ADMITTED, and EXPIRED after one).
	ExpiresAt time.Time
	// DrawAt is when the draw that places a PRE_QUEUE registration is due
	// (the sale's opensAt, or the end of a random-mode window), InDraw how
	// many it places.
	DrawAt time.Time
	InDraw int64
}

// Final reports whether the status can no longer change.
func (a Answer) Final() bool {
	return a.Status != StatusPending && a.Status != StatusWaiting && a.Status != StatusPreQueue
}

// AnswerOf maps a line status and the item's verdict at now to the answer:
// a registration still waiting or pending for an item that closed or sold
// out is CLOSED or SOLD_OUT; an admission past its end is EXPIRED.
func AnswerOf(st line.Status, v Verdict, now time.Time) Answer {
	a := Answer{}
	switch st.State {
	case line.Waiting:
		a.Status, a.TokenID, a.Position, a.WaitingTotal = StatusWaiting, st.TokenID, st.Position, st.WaitingTotal
	case line.Pending:
		a.Status = StatusPending
	case line.Pooled, line.Late:
		a.Status, a.TokenID, a.DrawAt, a.InDraw = StatusPreQueue, st.TokenID, time.UnixMilli(st.DrawAt), st.InDraw
	case line.Admitted:
		a.TokenID, a.ExpiresAt = st.TokenID, time.UnixMilli(st.ExpiresAtMs)
		a.Status = StatusExpired
		if a.ExpiresAt.After(now) {
			a.Status = StatusAdmitted
		}
	case line.Gone:
		a.Status, a.TokenID = StatusExpired, st.TokenID
	case line.Completed:
		a.Status, a.TokenID = StatusCompleted, st.TokenID
	case line.LeftLine:
		a.Status = StatusLeft
	case line.Abandoned:
		a.Status, a.TokenID = StatusAbandoned, st.TokenID
	case line.Duplicated:
		a.Status = StatusDuplicate
	default:
		a.Status = StatusRejected
	}
	if !a.Final() {
		switch v {
		case Closed:
			a.Status = StatusClosed
		case SoldOut:
			a.Status = StatusSoldOut
		}
	}
	return a
}
