// Package line holds the words of one item's line that every layer shares:
// the state a queue token is in (State, Status) and how the line moves
// (Motion, Place). The Redis store (store/queue) reads them; the rules
// (domain/registration) answer from them. No Redis, no Kafka.
package line

// State of a queue token, as Status reads it from Redis.
type State string

// States.
const (
	Pending   State = "PENDING"   // accepted by Kafka, not yet applied to the line
	Waiting   State = "WAITING"   // in the line
	Admitted  State = "ADMITTED"  // let through; Status.ExpiresAtMs says until when
	LeftLine  State = "LEFT"      // the user left the line
	Completed State = "COMPLETED" // the admission was used and ended
	Gone      State = "GONE"      // the admission expired
	Rejected  State = "REJECTED"  // applied but never placed (sent to the DLQ)
	// Abandoned: the place was released after the item's idleTimeout
	// without a sign of life (a poll or a stream).
	Abandoned State = "ABANDONED"
	Pooled    State = "POOLED" // pre-queued: placed by its window's draw (Status.DrawAt)
	Late      State = "LATE"   // queued behind a pending draw, placed right after it
	// Duplicated: applied, but another token holds the place key's place (a
	// proven user registered again); Status.TokenID names it while it is live.
	Duplicated State = "DUPLICATE"
)

// Status is where a token stands.
type Status struct {
	State        State
	Position     int64 // 1-based, when Waiting
	WaitingTotal int64 // when Waiting
	ExpiresAtMs  int64 // when Admitted
	// AdmittedLastMinute is how many of the item were admitted in the last
	// minute (when Waiting): the measured pace the ETA is computed from.
	AdmittedLastMinute int64
	// PacedSinceMs is when the oldest of those was admitted (unix ms; 0: none).
	PacedSinceMs int64
	// Active is how many of the item are admitted (when Waiting).
	Active int64
	// Seq is the live token's place in the item's sequence and Head the
	// item's head read with it (when Waiting): every waiting seq is above the
	// head, so the head's moves tell how the line moved (registration.Moved).
	Seq, Head int64
	// DrawAt is the window (unix ms) of the draw that places a Pooled or
	// Late token, InDraw how many that draw places (when Pooled or Late).
	DrawAt, InDraw int64
	TokenID        string // the token read; for Duplicated, the live token that holds the key's place ("" if none)
}

// Motion is how an item's line stands: its head and the counts a waiting
// registration's answer needs besides its own place.
type Motion struct {
	Head, WaitingTotal, AdmittedLastMinute, Active, PacedSinceMs int64
}

// Place is a waiting registration's exact place, read atomically with the
// item's head, line length and pace.
type Place struct {
	Seq      int64 // the registration's place number
	Head     int64 // the highest place number admitted so far
	Position int64 // 1-based
	Total    int64 // waiting in the item's line
	// AdmittedLastMinute is how many of the item were admitted in the last minute.
	AdmittedLastMinute int64
	// PacedSinceMs is when the oldest of those was admitted (unix ms; 0: none).
	PacedSinceMs int64
	// Active is how many of the item are admitted.
	Active int64
}
