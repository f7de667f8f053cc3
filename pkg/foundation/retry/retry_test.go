package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

var errBoom = errors.New("boom")

func TestWaitsDoubleUpToMax(t *testing.T) {
	w := Policy{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}.Waits()
	var got []time.Duration
	for range 5 {
		got = append(got, w.NextBackOff())
	}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("waits %v, want %v ms", got, want)
		}
	}
}

func TestDo(t *testing.T) {
	fast := Policy{Initial: time.Microsecond, Max: time.Microsecond}
	for name, c := range map[string]struct {
		attempts, failFor int
		permanent         bool
		wantTries         int
		wantErr           error
	}{
		"succeeds at once":         {attempts: 3, failFor: 0, wantTries: 1},
		"succeeds on the third":    {attempts: 3, failFor: 2, wantTries: 3},
		"gives up after three":     {attempts: 3, failFor: 9, wantTries: 3, wantErr: errBoom},
		"unbounded until it works": {attempts: 0, failFor: 20, wantTries: 21},
		"permanent stops at once":  {attempts: 5, failFor: 9, permanent: true, wantTries: 1, wantErr: errBoom},
		"permanent on the last":    {attempts: 1, failFor: 9, permanent: true, wantTries: 1, wantErr: errBoom},
	} {
		t.Run(name, func(t *testing.T) {
			p := fast
			p.Attempts = c.attempts
			tries, notified := 0, 0
			err := Do(context.Background(), p, func(context.Context) error {
				tries++
				if tries <= c.failFor {
					if c.permanent {
						return Permanent(errBoom)
					}
					return errBoom
				}
				return nil
			}, func(try int, err error, _ time.Duration) {
				notified++
				if try != notified || !errors.Is(err, errBoom) {
					t.Errorf("notify(%d, %v) on notification %d", try, err, notified)
				}
			})
			if tries != c.wantTries || !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("tries %d err %v, want %d %v", tries, err, c.wantTries, c.wantErr)
			}
			if err != nil && err != errBoom {
				t.Fatalf("err %#v: want the operation's error itself", err)
			}
			if notified != tries-1 { // before every wait, and there is none after the last try
				t.Fatalf("notified %d times for %d tries", notified, tries)
			}
		})
	}
}

// A context that ends stops the waits; the error names both causes.
func TestDoStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tries := 0
	err := Do(ctx, Policy{Initial: time.Hour}, func(context.Context) error {
		tries++
		cancel()
		return errBoom
	}, nil)
	if tries != 1 || !errors.Is(err, errBoom) || !errors.Is(err, context.Canceled) {
		t.Fatalf("tries %d err %v", tries, err)
	}
}
