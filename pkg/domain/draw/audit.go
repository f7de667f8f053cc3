package draw

import (
	"fmt"
	"slices"
)

// Audit recomputes an item's draws from its registrations records, fed in
// record order, as an auditor would: a register whose window is above the
// last draw's joins the pool (unless its user is pooled already); a leave
// takes the user's token out of the pool; a draw record of a window above
// the last one places every pooled token of a window up to its own in the
// order of its seed, once the seed hashes to the commitment. It knows
// nothing of admissions, so a repeat registration of a user who holds a
// place in the line (a duplicate the consumer ignores) is counted in the
// pool: the live comparison (waitroomctl draw verify --live) shows such a
// case as a token the line does not hold.
type Audit struct {
	// Commit is the item's commitment (waitroom.items' drawCommit).
	Commit string
	Draws  []Audited

	pool   map[string]int64  // tokenId -> window
	user   map[string]string // userId -> pooled tokenId
	last   int64             // the last drawn window
	rounds map[string]int64  // commit -> last round drawn
}

// Audited is one draw as the audit saw it.
type Audited struct {
	Window, Round int64
	Seed, Commit  string
	Offset        int64
	// Err says why the draw is not valid (the consumer dead-letters it):
	// its seed does not hash to its commit, its commit is not the item's,
	// or it reuses a round; nil: valid, and Order is its placement.
	Err   error
	Order []string
}

// NewAudit returns an audit against the item's commitment.
func NewAudit(commit string) *Audit {
	return &Audit{Commit: commit, pool: map[string]int64{}, user: map[string]string{}, rounds: map[string]int64{}}
}

// Register feeds a register record.
func (a *Audit) Register(user, token string, window int64) {
	if window <= a.last {
		return // not pooled: first come, first served
	}
	if _, pooled := a.user[user]; pooled {
		return
	}
	a.pool[token], a.user[user] = window, token
}

// Leave feeds a leave record.
func (a *Audit) Leave(user string) {
	if tok, ok := a.user[user]; ok {
		delete(a.pool, tok)
		delete(a.user, user)
	}
}

// Draw feeds a draw record at offset. A copy of a draw done already (a
// window at or below the last) is skipped and not listed.
func (a *Audit) Draw(window, round int64, seed, commit string, offset int64) {
	if window <= a.last {
		return
	}
	d := Audited{Window: window, Round: round, Seed: seed, Commit: commit, Offset: offset}
	switch {
	case Verify(seed, round, commit) != nil:
		d.Err = Verify(seed, round, commit)
	case round <= a.rounds[commit]:
		d.Err = fmt.Errorf("round %d of the chain was drawn already", round)
	}
	if d.Err == nil {
		for tok, w := range a.pool {
			if w <= window {
				d.Order = append(d.Order, tok)
			}
		}
		if err := Order(seed, d.Order); err != nil {
			d.Err = err
		}
	}
	if d.Err == nil {
		for _, tok := range d.Order {
			delete(a.pool, tok)
		}
		for u, tok := range a.user {
			if _, still := a.pool[tok]; !still {
				delete(a.user, u)
			}
		}
		a.last, a.rounds[commit] = window, round
		if commit != a.Commit {
			d.Err = fmt.Errorf("%w: the draw's commit %s is not the item's %s (a commitment replaced since?)", ErrMismatch, commit, a.Commit)
		}
	}
	a.Draws = append(a.Draws, d)
}

// Pooled is the tokens still waiting for a draw, sorted.
func (a *Audit) Pooled() []string {
	out := make([]string, 0, len(a.pool))
	for tok := range a.pool {
		out = append(out, tok)
	}
	slices.Sort(out)
	return out
}
