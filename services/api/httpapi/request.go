package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/waitroom/waitroom/topics"
)

// RegisterRequest is the body of POST .../registrations.
type RegisterRequest struct {
	// UserID identifies the user; empty means the server makes one.
	UserID string `json:"userId"`
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
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return RegisterRequest{}, &RequestError{Code: "INVALID_JSON", Message: describeJSONError(err)}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return RegisterRequest{}, &RequestError{Code: "INVALID_JSON", Message: "body must be a single JSON object"}
	}
	if req.UserID != "" && !topics.ValidID(req.UserID) {
		return RegisterRequest{}, &RequestError{Code: "INVALID_USER_ID", Message: "userId must be " + topics.IDRule}
	}
	return req, nil
}

func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %q must be a %s, not %s", te.Field, te.Type, te.Value)
		}
		return fmt.Sprintf("body must be a JSON object, not %s", te.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: unexpected end of body"
	default:
		return "malformed JSON: " + err.Error()
	}
}
