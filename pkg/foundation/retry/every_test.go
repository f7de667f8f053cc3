package retry_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/foundation/retry"
)

// The job runs at each interval, its errors reach onErr and it goes on; with
// final, one more run after the context ended, on a context still live.
func TestEveryRunsUntilTheEndThenOnceMore(t *testing.T) {
	for _, final := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		var runs, errs, lastRuns atomic.Int32
		done := make(chan struct{})
		go func() {
			defer close(done)
			retry.Every(ctx, 5*time.Millisecond, final, func(jctx context.Context) error {
				if ctx.Err() != nil {
					if jctx.Err() != nil {
						t.Error("the final run got an ended context")
					}
					lastRuns.Add(1)
					return errors.New("final failure")
				}
				if runs.Add(1)%2 == 0 {
					return errors.New("every other run fails")
				}
				return nil
			}, func(err error, last bool) {
				if last != (ctx.Err() != nil) {
					t.Errorf("onErr(last=%v) while the context ended=%v", last, ctx.Err() != nil)
				}
				errs.Add(1)
			})
		}()
		for runs.Load() < 4 {
			time.Sleep(time.Millisecond)
		}
		cancel()
		<-done
		want := int32(0)
		if final {
			want = 1
		}
		if lastRuns.Load() != want {
			t.Errorf("final=%v: %d runs after the end, want %d", final, lastRuns.Load(), want)
		}
		if errs.Load() < 2+want-1 {
			t.Errorf("final=%v: only %d errors reported", final, errs.Load())
		}
	}
}
