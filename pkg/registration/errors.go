package registration

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/httpserver"
)

// Error is a refusal a client sees: the HTTP status, a stable code and a
// message. Every rule of this package fails with one.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter asks the client to retry after this many seconds (0: not said).
	RetryAfter int
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func refuse(status int, code, message string) *Error {
	return &Error{Status: status, Code: code, Message: message}
}

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
// with a shared secret (404).
var ErrNoPublicKey = Disabled("JWKS_DISABLED", "admission tokens are signed with a shared secret")

// ErrShuttingDown asks a client to reconnect elsewhere: this replica is
// stopping (503, Retry-After 1).
var ErrShuttingDown = &Error{Status: http.StatusServiceUnavailable, Code: "SHUTTING_DOWN", Message: "this replica is stopping; reconnect", RetryAfter: 1}

// Abort answers err as JSON and stops the handler chain: the one place where
// errors become HTTP. An err that is not an *Error is a 500.
func Abort(c *gin.Context, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = Internal("internal error")
	}
	if e.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	c.Set(ErrorCodeKey, e.Code)
	httpserver.Abort(c, e.Status, e.Code, e.Message)
}

// ErrorCodeKey is the gin context key under which Abort leaves the error
// code it answered, for middleware that counts refusals.
const ErrorCodeKey = "waitroom.error-code"
