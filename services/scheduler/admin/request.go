package admin

import (
	"bytes"

	"github.com/waitroom/waitroom/pkg/domain/itempatch"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
)

// AdmissionRequest is the body of PUT .../items/:itemId/admission; only the
// fields given change (itempatch.Policy: {"paused":true} stops admission and
// keeps the rate, {"paused":false} alone resumes at it).
type AdmissionRequest struct {
	itempatch.Policy
}

// ItemRequest is the body of POST .../items/:itemId; only the fields given change.
type ItemRequest struct {
	itempatch.State
}

// RequestError is a problem with a request, named by a stable code.
type RequestError struct {
	Code    string
	Message string
}

func (e *RequestError) Error() string { return e.Code + ": " + e.Message }

// Apply checks the request and returns p with the request's changes; the
// error names the offending field.
func (r *AdmissionRequest) Apply(p topics.AdmissionPolicy) (topics.AdmissionPolicy, *RequestError) {
	if r.Empty() {
		return p, &RequestError{Code: "INVALID_POLICY", Message: "give at least one of ratePerSecond, maxActive, sessionTTLSeconds, paused, minRate, maxRate, steer, unsteer"}
	}
	next, err := r.Policy.Apply(p)
	if err != nil {
		return p, &RequestError{Code: "INVALID_POLICY", Message: err.Error()}
	}
	return next, nil
}

// Apply checks the request and returns s with its changes.
func (r *ItemRequest) Apply(s topics.ItemState) (topics.ItemState, *RequestError) {
	if err := r.Check(); err != nil {
		if err.Field == "template" || err.Field == "templates" { // the seller's pages: their own code, the problem's line in the message
			return s, &RequestError{Code: "INVALID_TEMPLATE", Message: err.Error()}
		}
		return s, &RequestError{Code: "INVALID_ITEM", Message: err.Error()}
	}
	return r.State.Apply(s), nil
}

// decodeStrict decodes body into v: one JSON object with known fields of the
// right types, nothing after it. An empty body is refused.
func decodeStrict(body []byte, v any) *RequestError {
	if len(bytes.TrimSpace(body)) == 0 {
		return &RequestError{Code: "INVALID_JSON", Message: "body must be a JSON object"}
	}
	if e := httpserver.DecodeJSON(body, v); e != nil {
		return &RequestError{Code: e.Code, Message: e.Message}
	}
	return nil
}
