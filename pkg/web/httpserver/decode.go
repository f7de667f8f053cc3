package httpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// DecodeJSON decodes body strictly into v: one JSON object, known fields
// only, the right types. Its error says what is wrong in words a client can
// act on (code INVALID_JSON).
func DecodeJSON(body []byte, v any) *ErrorDetail {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &ErrorDetail{Code: "INVALID_JSON", Message: describeJSONError(err)}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &ErrorDetail{Code: "INVALID_JSON", Message: "body must be a single JSON object"}
	}
	return nil
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
