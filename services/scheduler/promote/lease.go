package promote

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
)

// stallFactor times the lock expiry is how long the replica's loop may go
// without a sign of progress (the start of a pass, an acquire, a shard's
// tick) before its leases stop being extended: a loop stuck for good (a
// call that never returns) gives its shards up as a dead replica would.
const stallFactor = 5

// deadline is what a tick asks of its lock: until when it is ours.
type deadline interface{ Until() time.Time }

// lease is one shard this replica leads. Its lock is extended by its own
// goroutine (keep), apart from the ticks: a pass of the loop that takes
// longer than the lock expiry (acquiring several shards, each claim a Kafka
// produce; a slow publish; a starved process) must not lose every lock it
// holds, or leadership churns while nobody is admitted. Fencing never
// depended on the lock (a stale epoch is refused by promote.lua), only
// liveness did.
type lease struct {
	shard int
	mu    *redsync.Mutex // keep's alone once it runs
	epoch int64

	until atomic.Int64 // unix ns: the lock's validity as of its last extension
	lost  chan error   // keep's reason for giving the lock up (buffered 1)
	stop  context.CancelFunc
	done  chan struct{}
}

// Until is the lock's validity as of its last extension.
func (l *lease) Until() time.Time { return time.Unix(0, l.until.Load()) }

// errStalled is keep's answer to a loop that made no progress for
// stallFactor lock expiries.
var errStalled = errors.New("the replica's loop made no progress")

// hold starts extending l's lock (just taken by TryLock) every tick until
// release or until it is lost.
func (s *Scheduler) hold(ctx context.Context, sh int, mu *redsync.Mutex) *lease {
	l := &lease{shard: sh, mu: mu, lost: make(chan error, 1), done: make(chan struct{})}
	l.until.Store(mu.Until().UnixNano())
	kctx, cancel := context.WithCancel(ctx)
	l.stop = cancel
	go s.keep(kctx, l)
	return l
}

// keep extends l's lock every tick while the loop makes progress. A failed
// extension is tried again while the lock is still valid (one reset link is
// not a lost lock); the lock is lost when another replica holds it, when it
// ran out, or when the loop stalled.
func (s *Scheduler) keep(ctx context.Context, l *lease) {
	defer close(l.done)
	t := time.NewTicker(s.opt.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if idle := time.Since(time.Unix(0, s.progress.Load())); idle > stallFactor*s.opt.LockExpiry {
			l.lost <- fmt.Errorf("%w for %s", errStalled, idle.Round(time.Millisecond))
			return
		}
		until := l.Until()
		ectx, cancel := context.WithDeadline(ctx, until)
		ok, err := l.mu.ExtendContext(ectx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case ok && err == nil:
			l.until.Store(l.mu.Until().UnixNano())
		case isTaken(err) || !time.Now().Before(until):
			if err == nil {
				err = errors.New("the lock was not extended")
			}
			l.lost <- err
			return
		}
	}
}

// release stops extending l's lock and waits for keep to end, so the
// mutex is the caller's again.
func (l *lease) release() {
	l.stop()
	<-l.done
}

// lostErr is why keep gave l's lock up, or nil while it holds it.
func (l *lease) lostErr() error {
	select {
	case err := <-l.lost:
		return err
	default:
		return nil
	}
}

// stepped records progress of the loop (keep extends only while it moves).
func (s *Scheduler) stepped() { s.progress.Store(time.Now().UnixNano()) }
