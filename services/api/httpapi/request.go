package httpapi

import (
	"bytes"

	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
)

// RegisterRequest is the body of POST .../registrations.
type RegisterRequest struct {
	// UserID identifies the user; empty means the server makes one.
	UserID string `json:"userId"`
	// Pow is the solved proof-of-work of an item that asks for one.
	Pow *PowSolution `json:"pow,omitempty"`
	// Bypass is an operator's bypass code.
	Bypass string `json:"bypass,omitempty"`
	// Assertion is the site-signed JWT that proves the userId (pkg/security/assertion).
	Assertion string `json:"assertion,omitempty"`
	// RequestID names the registration across the client's retries: a
	// retry whose first answer was lost gets the same place back (see
	// tokenIDFor) instead of a second one nobody holds.
	RequestID string `json:"requestId,omitempty"`
}

// MinRequestIDLen is the shortest requestId: it stands for the place until
// the first answer arrives, so it must not be guessable.
const MinRequestIDLen = 16

// PowSolution is a challenge (GET .../challenge) and its solution (services/api/pow).
type PowSolution struct {
	Challenge string `json:"challenge"`
	Solution  string `json:"solution"`
}

// RequestError is a problem with a request, named by a stable code.
type RequestError struct {
	Code    string
	Message string
}

func (e *RequestError) Error() string { return e.Code + ": " + e.Message }

// DecodeRegisterRequest decodes a register body strictly: an empty body is an
// empty request; anything else must be one JSON object with known fields of
// the right types, and a userId, when given, must be a valid id.
func DecodeRegisterRequest(body []byte) (RegisterRequest, *RequestError) {
	var req RegisterRequest
	if len(bytes.TrimSpace(body)) == 0 {
		return req, nil
	}
	if e := httpserver.DecodeJSON(body, &req); e != nil {
		return RegisterRequest{}, &RequestError{Code: e.Code, Message: e.Message}
	}
	if req.UserID != "" && !topics.ValidID(req.UserID) {
		return RegisterRequest{}, &RequestError{Code: "INVALID_USER_ID", Message: "userId must be " + topics.IDRule}
	}
	if req.RequestID != "" && (len(req.RequestID) < MinRequestIDLen || !topics.ValidID(req.RequestID)) {
		return RegisterRequest{}, &RequestError{Code: "INVALID_REQUEST_ID", Message: "requestId must be at least 16 characters and " + topics.IDRule}
	}
	return req, nil
}
