package registration

import (
	"errors"
	"net/http"

	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/topics"
)

// CheckItemID refuses an item id that is not an id or is reserved (400
// INVALID_ITEM_ID, the message says which: topics.ItemIDProblem).
func CheckItemID(item string) error {
	if p := topics.ItemIDProblem(item); p != "" {
		return refuse(http.StatusBadRequest, "INVALID_ITEM_ID", p)
	}
	return nil
}

// AuthorizeQueue checks a queue token raw against the item of the request's
// path: 400 INVALID_ITEM_ID, 401 TOKEN_MISSING / TOKEN_INVALID /
// TOKEN_EXPIRED, or 403 TOKEN_ITEM_MISMATCH.
func AuthorizeQueue(signer *token.Signer, item, raw string) (token.Queue, error) {
	q, _, err := AuthorizeQueueSlot(signer, item, raw)
	return q, err
}

// AuthorizeQueueSlot is AuthorizeQueue that also hands out the token's slot
// when signer remembers it (token.Signer.ParseQueueSlot); nil on a refusal.
func AuthorizeQueueSlot(signer *token.Signer, item, raw string) (token.Queue, *token.Slot, error) {
	if err := CheckItemID(item); err != nil {
		return token.Queue{}, nil, err
	}
	if raw == "" {
		return token.Queue{}, nil, refuse(http.StatusUnauthorized, "TOKEN_MISSING", "give the queue token in the path, as ?token= or as an Authorization bearer")
	}
	q, slot, err := signer.ParseQueueSlot(raw)
	switch {
	case errors.Is(err, token.ErrExpired):
		return token.Queue{}, nil, refuse(http.StatusUnauthorized, "TOKEN_EXPIRED", "the queue token has expired; register again")
	case err != nil:
		return token.Queue{}, nil, refuse(http.StatusUnauthorized, "TOKEN_INVALID", "the queue token is not valid")
	case q.ItemID != item:
		return token.Queue{}, nil, refuse(http.StatusForbidden, "TOKEN_ITEM_MISMATCH", "the queue token is for another item")
	}
	return q, slot, nil
}

// AuthorizeAdmission checks an admission token raw, and when item is not
// empty that it is for item: 400 INVALID_ITEM_ID, 401 TOKEN_MISSING /
// TOKEN_INVALID / TOKEN_EXPIRED, or 403 TOKEN_ITEM_MISMATCH. It does not say
// the admission is still live (see AdmissionEnded).
func AuthorizeAdmission(signer *token.Signer, item, raw string) (token.Admission, error) {
	if raw == "" {
		return token.Admission{}, refuse(http.StatusUnauthorized, "TOKEN_MISSING", "give the admission token as \"token\" or an Authorization bearer")
	}
	if item != "" {
		if err := CheckItemID(item); err != nil {
			return token.Admission{}, err
		}
	}
	a, err := signer.ParseAdmission(raw)
	switch {
	case errors.Is(err, token.ErrExpired):
		return token.Admission{}, refuse(http.StatusUnauthorized, "TOKEN_EXPIRED", "the admission has expired")
	case err != nil:
		return token.Admission{}, refuse(http.StatusUnauthorized, "TOKEN_INVALID", "the admission token is not valid")
	case item != "" && item != a.ItemID:
		return token.Admission{}, refuse(http.StatusForbidden, "TOKEN_ITEM_MISMATCH", "the admission token is for another item")
	}
	return a, nil
}

// ErrAdmissionEnded refuses an admission that expired or was completed (410).
var ErrAdmissionEnded = refuse(http.StatusGone, "ADMISSION_ENDED", "the admission expired or was completed")
