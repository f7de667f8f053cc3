package registration

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Error is a refusal a client sees: the HTTP status, a stable code and a
// message (the API's contract, docs/api.md). Every rule of this package
// fails with one; the web edge answers it (httpserver.Abort), so the rules
// import no web framework.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter asks the client to retry after this many seconds (0: not said).
	RetryAfter int
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Answer is e as the web edge answers it (httpserver.Abort).
func (e *Error) Answer() (status int, code, message string, retryAfter int) {
	return e.Status, e.Code, e.Message, e.RetryAfter
}

// Refuse is the refusal status, code, message: the one constructor of an
// Error with no rule of its own.
func Refuse(status int, code, message string) *Error {
	return &Error{Status: status, Code: code, Message: message}
}

func refuse(status int, code, message string) *Error { return Refuse(status, code, message) }

// Unavailable is the answer while a dependency cannot be read or written:
// 503 with Retry-After 1.
// RateLimited is 429 RATE_LIMITED: the door's bucket of by ("ip" or "user")
// is empty for retryAfter.
func RateLimited(by string, retryAfter time.Duration) *Error {
	who := "this address"
	if by == "user" {
		who = "this user"
	}
	secs := int(math.Ceil(retryAfter.Seconds()))
	if secs < 1 {
		secs = 1
	}
	e := refuse(http.StatusTooManyRequests, "RATE_LIMITED", fmt.Sprintf("too many registrations from %s; retry in %d s", who, secs))
	e.RetryAfter = secs
	return e
}

func Unavailable(message string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: "UNAVAILABLE", Message: message, RetryAfter: 1}
}

// Internal is the answer to our own failure (500).
func Internal(message string) *Error {
	return refuse(http.StatusInternalServerError, "INTERNAL", message)
}

// BadRequest refuses a malformed request (400) with code.
func BadRequest(code, message string) *Error {
	return refuse(http.StatusBadRequest, code, message)
}

// Disabled refuses what this service is not set up to do (409), with a code
// <FEATURE>_DISABLED: the naming rule is in docs/api.md, "Error codes".
func Disabled(code, message string) *Error {
	return refuse(http.StatusConflict, code, message)
}

// Unauthorized refuses a request whose credentials (a token, an assertion)
// are missing or not good (401) with code.
func Unauthorized(code, message string) *Error {
	return refuse(http.StatusUnauthorized, code, message)
}

// BodyTooLarge refuses a body over limit bytes (413).
func BodyTooLarge(limit int64) *Error {
	return refuse(http.StatusRequestEntityTooLarge, "BODY_TOO_LARGE", "request body is larger than the limit of "+strconv.FormatInt(limit, 10)+" bytes")
}

// ErrNoPublicKey answers a JWKS request when admission tokens are signed
// with a shared secret (409, as every _DISABLED refusal).
var ErrNoPublicKey = Disabled("JWKS_DISABLED", "admission tokens are signed with a shared secret")

// ErrShuttingDown asks a client to reconnect elsewhere: this replica is
// stopping (503, Retry-After 1).
var ErrShuttingDown = &Error{Status: http.StatusServiceUnavailable, Code: "SHUTTING_DOWN", Message: "this replica is stopping; reconnect", RetryAfter: 1}
