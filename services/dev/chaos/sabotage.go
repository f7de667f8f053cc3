package chaos

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
)

// Sabotages the suite can commit mid-nemesis, to prove that a broken build
// fails a run (Options.Sabotage). Each writes what a broken service would.
const (
	// SabotageReadmit publishes, on waitroom.admissions, a second admission
	// of the first person admitted on one of the load's items, with a new
	// expiry and the last epoch seen: what a stalled leader with its
	// fencing switched off publishes when its late tick goes through. The
	// run must report it doubled and fail.
	SabotageReadmit = "readmit"
)

// sabotage commits what (SabotageReadmit) on the record tl reads.
func sabotage(ctx context.Context, what string, tl *tail, out io.Writer) error {
	if what != SabotageReadmit {
		return fmt.Errorf("unknown sabotage %q (known: %s)", what, SabotageReadmit)
	}
	tl.mu.Lock()
	var ev topics.AdmissionEvent
	for _, item := range Items {
		if ts := tl.ticks[item]; len(ts) > 0 && len(ts[0].Admitted) > 0 {
			last := ts[len(ts)-1]
			ev = topics.AdmissionEvent{V: topics.Version, ItemID: item, Admitted: ts[0].Admitted[:1],
				ExpiresAt: []int64{time.Now().Add(time.Minute).UnixMilli()}, Head: last.Head, Epoch: last.Epoch, At: time.Now().UnixMilli()}
			break
		}
	}
	tl.mu.Unlock()
	if ev.ItemID == "" {
		return fmt.Errorf("sabotage %s: nobody admitted yet", what)
	}
	res := tl.cl.ProduceSync(ctx, &kgo.Record{Topic: topics.Admissions, Key: []byte(ev.ItemID), Value: topics.Encode(&ev)})
	if err := res.FirstErr(); err != nil {
		return fmt.Errorf("sabotage %s: publish: %w", what, err)
	}
	fmt.Fprintf(out, "chaos: SABOTAGE: %s admitted again on %s under epoch %d, as an unfenced stale leader would: this run must fail\n",
		ev.Admitted[0], ev.ItemID, ev.Epoch)
	return nil
}
