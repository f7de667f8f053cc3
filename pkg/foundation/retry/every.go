package retry

import (
	"context"
	"time"
)

// FinalGrace bounds the last run after the context ended.
const FinalGrace = time.Second

// Every runs job every interval until ctx ends (the flushes of counts kept in
// memory, the scheduler's idle sweep). With final, it runs job once
// more after that, with FinalGrace to finish, so a graceful stop loses
// nothing the job would have written. A failed run is passed to onErr (with
// last set for the final run; not when it failed because ctx ended) and
// tried again at the next interval.
func Every(ctx context.Context, every time.Duration, final bool, job func(context.Context) error, onErr func(err error, last bool)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if !final {
				return
			}
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), FinalGrace)
			defer cancel()
			if err := job(fctx); err != nil {
				onErr(err, true)
			}
			return
		case <-t.C:
			if err := job(ctx); err != nil && ctx.Err() == nil {
				onErr(err, false)
			}
		}
	}
}
