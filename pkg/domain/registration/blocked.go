package registration

import (
	"net/http"
	"time"

	"github.com/waitroom/waitroom/topics"
)

// BlockMessage is what a blocked client is told: the operator's reason and,
// when the block ends by itself, when.
func BlockMessage(b topics.BlockState) string {
	msg := "blocked by the operator"
	if b.Reason != "" {
		msg += ": " + b.Reason
	}
	if b.Until > 0 {
		msg += " (until " + time.UnixMilli(b.Until).UTC().Format(time.RFC3339) + ")"
	}
	return msg
}

// Blocked is 403 BLOCKED: an operator blocked the user or the address the
// request came from; the message names the reason.
func Blocked(b topics.BlockState) *Error {
	return refuse(http.StatusForbidden, StatusBlocked, BlockMessage(b))
}
