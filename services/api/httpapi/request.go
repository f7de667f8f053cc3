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
	// Auto asks for auto entry (the kit's): the item must be in mode auto
	// (else 409 NOT_AUTO, nothing recorded), and while it has room the
	// answer waits a moment for the scheduler and carries the admission.
	Auto bool `json:"auto,omitempty"`
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
	if !decodeFlat(body, &req) {
		req = RegisterRequest{}
		if e := httpserver.DecodeJSON(body, &req); e != nil {
			return RegisterRequest{}, &RequestError{Code: e.Code, Message: e.Message}
		}
	}
	if req.UserID != "" && !topics.ValidID(req.UserID) {
		return RegisterRequest{}, &RequestError{Code: "INVALID_USER_ID", Message: "userId must be " + topics.IDRule}
	}
	if req.RequestID != "" && (len(req.RequestID) < MinRequestIDLen || !topics.ValidID(req.RequestID)) {
		return RegisterRequest{}, &RequestError{Code: "INVALID_REQUEST_ID", Message: "requestId must be at least 16 characters and " + topics.IDRule}
	}
	return req, nil
}

// decodeFlat decodes the common register body without reflection: one
// object of string fields named exactly as RegisterRequest's (userId,
// bypass, assertion, requestId), each at most once, whose strings are
// printable ASCII without escapes. It reports false, having decoded
// nothing reliable, for anything else (a pow object, a null, an escape,
// other bytes, a repeated or differently cased key, an error), which
// httpserver.DecodeJSON then decodes or refuses as before.
// FuzzDecodeFlatAgrees holds the two to the same answer.
func decodeFlat(b []byte, req *RegisterRequest) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	var seen uint8
	for {
		key, j, ok := flatString(b, i)
		if !ok {
			return false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		val, j, ok := flatString(b, skipSpace(b, i+1))
		if !ok {
			return false
		}
		var f *string
		var bit uint8
		switch string(key) { // no allocation: compared in place
		case "userId":
			f, bit = &req.UserID, 1
		case "bypass":
			f, bit = &req.Bypass, 2
		case "assertion":
			f, bit = &req.Assertion, 4
		case "requestId":
			f, bit = &req.RequestID, 8
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		*f = string(val)
		i = skipSpace(b, j)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// flatString reads the string at b[i:] (its quotes included) when it holds
// printable ASCII only, no escape; it returns its contents and the index
// after its closing quote.
func flatString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// skipSpace skips JSON's whitespace from b[i:].
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
