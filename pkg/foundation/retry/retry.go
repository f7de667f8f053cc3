// Package retry is how waitroom tries again: the one back-off of its retry
// loops (Do, on github.com/cenkalti/backoff/v5: waits start at Initial and
// double up to Max) and the one loop of a job at a fixed interval (Every).
package retry

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Policy says how often and how long apart an operation is tried.
type Policy struct {
	// Initial is the wait before the second try (default 100 ms); each next
	// wait doubles it.
	Initial time.Duration
	// Max caps a wait (default 30 s).
	Max time.Duration
	// Attempts counts the tries in all, the first included; 0 tries until the
	// operation succeeds or the context ends.
	Attempts int
}

func (p Policy) withDefaults() Policy {
	if p.Initial <= 0 {
		p.Initial = 100 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 30 * time.Second
	}
	p.Max = max(p.Max, p.Initial)
	return p
}

// Waits returns p's waits, one per NextBackOff call: Initial, then doubling,
// capped at Max, without jitter (the callers are few and not synchronised).
// It never answers backoff.Stop: Attempts is the caller's to count.
func (p Policy) Waits() backoff.BackOff {
	p = p.withDefaults()
	b := &backoff.ExponentialBackOff{InitialInterval: p.Initial, Multiplier: 2, MaxInterval: p.Max}
	b.Reset()
	return b
}

// Permanent marks err as not worth another try: Do returns err at once.
func Permanent(err error) error { return backoff.Permanent(err) }

// Do runs op until it returns nil, a Permanent error, or p.Attempts tries
// were made, or ctx ends. Before each wait it calls notify (when not nil)
// with the number of the try that failed (1 for the first), its error and the
// wait. It returns nil, op's last error, or, when ctx ended, op's last error
// joined with ctx's.
func Do(ctx context.Context, p Policy, op func(ctx context.Context) error, notify func(try int, err error, wait time.Duration)) error {
	var last error
	tries := 0
	opts := []backoff.RetryOption{backoff.WithBackOff(p.Waits()), backoff.WithMaxElapsedTime(0)}
	if p.Attempts > 0 {
		opts = append(opts, backoff.WithMaxTries(uint(p.Attempts)))
	}
	if notify != nil {
		opts = append(opts, backoff.WithNotify(func(err error, wait time.Duration) { notify(tries, err, wait) }))
	}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		tries++
		last = op(ctx)
		return struct{}{}, last
	}, opts...)
	if pe, ok := err.(*backoff.PermanentError); ok { // Attempts ran out on a permanent error
		err = pe.Err
	}
	if cerr := ctx.Err(); err != nil && cerr != nil && errors.Is(err, cerr) && last != nil && !errors.Is(last, cerr) {
		return errors.Join(last, err)
	}
	return err
}

// Sleep waits d, or less when ctx ends first (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
