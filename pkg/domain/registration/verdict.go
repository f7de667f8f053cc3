package registration

import (
	"net/http"

	"github.com/waitroom/waitroom/topics"
)

// Verdict is what an item's state means for the people in its line.
type Verdict uint8

// Verdicts.
const (
	Open    Verdict = iota // enabled and not sold out
	Closed                 // disabled, or unknown (deleted)
	SoldOut                // stock 0
)

// VerdictOf judges an item's state (known false: no such item).
func VerdictOf(st topics.ItemState, known bool) Verdict {
	switch {
	case !known || !st.Enabled:
		return Closed
	case st.SoldOut():
		return SoldOut
	}
	return Open
}

// Decide says whether a new registration for item may join its line: nil, or
// 404 ITEM_NOT_FOUND, 409 QUEUE_CLOSED, 410 SOLD_OUT, 409 REGISTRATION_REJECTED
// (the item's mode is reject: its message, or a default one).
func Decide(item string, st topics.ItemState, known bool) error {
	switch {
	case !known:
		return refuse(http.StatusNotFound, "ITEM_NOT_FOUND", "no item "+item)
	case VerdictOf(st, known) == Closed:
		return refuse(http.StatusConflict, "QUEUE_CLOSED", "the line of "+item+" is closed")
	case VerdictOf(st, known) == SoldOut:
		return refuse(http.StatusGone, "SOLD_OUT", item+" is sold out")
	case st.ModeOf() == topics.ModeReject:
		msg := st.RejectMessage
		if msg == "" {
			msg = "the line of " + item + " takes no new registrations right now"
		}
		return refuse(http.StatusConflict, "REGISTRATION_REJECTED", msg)
	}
	return nil
}

// DecideAuto is Decide for a registration that asks for auto entry (the
// kit's): only an item in topics.ModeAuto takes one; any other item answers
// 409 NOT_AUTO and nothing is recorded, so the kit sends the visitor to the
// waiting page, which registers as usual.
func DecideAuto(item string, st topics.ItemState, known bool) error {
	if err := Decide(item, st, known); err != nil {
		return err
	}
	if st.ModeOf() != topics.ModeAuto {
		return refuse(http.StatusConflict, "NOT_AUTO", "the mode of "+item+" is "+st.ModeOf()+", not auto: register through the waiting page")
	}
	return nil
}
