package admin

import (
	"bytes"
	"fmt"

	"github.com/waitroom/waitroom/pkg/httpserver"
	"github.com/waitroom/waitroom/topics"
)

// Bounds of an operator's admission change, tighter than the contract's
// (topics.ItemState.Validate) so a typo cannot open the floodgates.
const (
	maxRate       = 100_000
	maxActiveCap  = 10_000_000
	maxTTLSeconds = 86_400
)

// Defaults of an item created by POST .../items/:itemId.
var defaultPolicy = topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 1000, SessionTTLSeconds: 300}

// AdmissionRequest is the body of PUT .../items/:itemId/admission; only the
// fields given change.
type AdmissionRequest struct {
	RatePerSecond     *float64 `json:"ratePerSecond"`
	MaxActive         *int64   `json:"maxActive"`
	SessionTTLSeconds *int64   `json:"sessionTTLSeconds"`
	// Paused true stops admission (rate 0); false resumes it and needs a ratePerSecond.
	Paused *bool `json:"paused"`
}

// ItemRequest is the body of POST .../items/:itemId; only the fields given change.
type ItemRequest struct {
	Name    *string `json:"name"`
	Stock   *int64  `json:"stock"` // topics.Unlimited (-1) or how many are left
	Enabled *bool   `json:"enabled"`
}

// RequestError is a problem with a request, named by a stable code.
type RequestError struct {
	Code    string
	Message string
}

func (e *RequestError) Error() string { return e.Code + ": " + e.Message }

func invalidPolicy(format string, a ...any) *RequestError {
	return &RequestError{Code: "INVALID_POLICY", Message: fmt.Sprintf(format, a...)}
}

// Apply checks the request and returns p with the request's changes; the
// error names the offending field.
func (r *AdmissionRequest) Apply(p topics.AdmissionPolicy) (topics.AdmissionPolicy, *RequestError) {
	if r.RatePerSecond == nil && r.MaxActive == nil && r.SessionTTLSeconds == nil && r.Paused == nil {
		return p, invalidPolicy("give at least one of ratePerSecond, maxActive, sessionTTLSeconds, paused")
	}
	if v := r.RatePerSecond; v != nil && (*v < 0 || *v > maxRate) {
		return p, invalidPolicy("ratePerSecond %v is not in 0..%d (0 pauses)", *v, maxRate)
	}
	if v := r.MaxActive; v != nil && (*v < 0 || *v > maxActiveCap) {
		return p, invalidPolicy("maxActive %d is not in 0..%d (0 means no cap)", *v, maxActiveCap)
	}
	if v := r.SessionTTLSeconds; v != nil && (*v < 1 || *v > maxTTLSeconds) {
		return p, invalidPolicy("sessionTTLSeconds %d is not in 1..%d", *v, maxTTLSeconds)
	}
	if r.Paused != nil {
		switch {
		case *r.Paused && r.RatePerSecond != nil && *r.RatePerSecond > 0:
			return p, invalidPolicy("paused true conflicts with ratePerSecond %v: pausing sets the rate to 0", *r.RatePerSecond)
		case !*r.Paused && r.RatePerSecond == nil:
			return p, invalidPolicy("paused false needs ratePerSecond: the rate to resume at")
		case !*r.Paused && *r.RatePerSecond == 0:
			return p, invalidPolicy("paused false needs ratePerSecond above 0")
		}
	}
	if r.RatePerSecond != nil {
		p.RatePerSecond = *r.RatePerSecond
	}
	if r.Paused != nil && *r.Paused {
		p.RatePerSecond = 0
	}
	if r.MaxActive != nil {
		p.MaxActive = *r.MaxActive
	}
	if r.SessionTTLSeconds != nil {
		p.SessionTTLSeconds = *r.SessionTTLSeconds
	}
	return p, nil
}

// Apply returns s with the request's changes; the caller validates the result.
func (r *ItemRequest) Apply(s topics.ItemState) topics.ItemState {
	if r.Name != nil {
		s.Name = *r.Name
	}
	if r.Stock != nil {
		s.Stock = *r.Stock
	}
	if r.Enabled != nil {
		s.Enabled = *r.Enabled
	}
	return s
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
