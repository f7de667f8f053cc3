package view

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// HeldTicks is the Reflected of a view kept by line: a committed admission
// event in a gap the marker has not passed is held by the view when it is a
// tick (not an epoch claim or a steering decision) whose admissions the line
// already holds, each admitted until its recorded expiry while still
// admitted (queue.Line.HoldsAdmissions). An event that does not decode
// is not held: the view is judged behind, as before.
func HeldTicks(line *queue.Line) Reflected {
	return func(ctx context.Context, rec *kgo.Record) (bool, error) {
		ev, err := topics.DecodeAdmission(rec.Value)
		if err != nil || ev.Kind != "" || ev.ItemID == "" {
			return false, nil
		}
		return line.HoldsAdmissions(ctx, ev.ItemID, ev.Epoch, ev.Admitted, ev.ExpiresAt)
	}
}
