package httpapi

import (
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
)

// The register and status answers are built by appending, byte for byte what
// encoding/json writes for the structs (TestAnswersEncodeAsJSON), without
// reflection, into a pooled buffer.

const jsonType = "application/json; charset=utf-8"

func (r *RegisterResponse) appendJSON(b []byte) []byte {
	b = field(b, `{"status":`, r.Status)
	b = field(b, `,"itemId":`, r.ItemID)
	b = field(b, `,"userId":`, r.UserID)
	b = field(b, `,"tokenId":`, r.TokenID)
	b = field(b, `,"token":`, r.Token)
	b = field(b, `,"statusUrl":`, r.StatusURL)
	b = field(b, `,"eventsUrl":`, r.EventsURL)
	b = intField(b, `,"drawAt":`, r.DrawAt)
	b = intField(b, `,"opensAt":`, r.OpensAt)
	b = optField(b, `,"admissionToken":`, r.AdmissionToken)
	b = optField(b, `,"expiresAt":`, r.ExpiresAt)
	return append(b, '}')
}

func (r *StatusResponse) appendJSON(b []byte) []byte {
	b = field(b, `{"status":`, r.Status)
	b = field(b, `,"itemId":`, r.ItemID)
	b = field(b, `,"userId":`, r.UserID)
	b = field(b, `,"tokenId":`, r.TokenID)
	b = intField(b, `,"position":`, r.Position)
	b = intField(b, `,"waitingTotal":`, r.WaitingTotal)
	if r.EtaSeconds != nil { // 0 is an answer: sent whenever set
		b = strconv.AppendInt(append(b, `,"etaSeconds":`...), *r.EtaSeconds, 10)
	}
	b = optField(b, `,"admissionToken":`, r.AdmissionToken)
	b = optField(b, `,"expiresAt":`, r.ExpiresAt)
	b = optField(b, `,"token":`, r.Token)
	b = intField(b, `,"pollAfterMs":`, r.PollAfterMs)
	b = optField(b, `,"message":`, r.Message)
	b = intField(b, `,"drawAt":`, r.DrawAt)
	b = intField(b, `,"inDraw":`, r.InDraw)
	b = optField(b, `,"notice":`, r.Notice)
	b = optField(b, `,"cursor":`, r.Cursor)
	return append(b, '}')
}

// field appends key (with its leading brace or comma and the colon) and
// the string v quoted.
func field(b []byte, key, v string) []byte {
	return httpserver.AppendJSONString(append(b, key...), v)
}

// optField is field for an `omitempty` string: nothing when v is empty.
func optField(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return field(b, key, v)
}

// intField appends an `omitempty` integer: nothing when v is 0.
func intField(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), v, 10)
}

// write answers code with r's JSON.
func (r *RegisterResponse) write(c *gin.Context, code int) {
	buf := httpserver.Buffer()
	*buf = r.appendJSON(*buf)
	writeJSON(c, code, *buf)
	httpserver.PutBuffer(buf)
}

// write answers code with r's JSON.
func (r *StatusResponse) write(c *gin.Context, code int) {
	buf := httpserver.Buffer()
	*buf = r.appendJSON(*buf)
	writeJSON(c, code, *buf)
	httpserver.PutBuffer(buf)
}

// jsonTypeValue and retryAfterValues are header values shared by every
// answer, so setting them allocates nothing. Each has cap == len: a later
// Header().Add copies it instead of writing into the shared array, and
// net/http copies the header map before it writes.
var (
	jsonTypeValue    = []string{jsonType}
	retryAfterValues = func() [][]string {
		v := make([][]string, 61)
		for i := range v {
			v[i] = []string{strconv.Itoa(i)}
		}
		return v
	}()
)

// setRetryAfter sets Retry-After to secs.
func setRetryAfter(c *gin.Context, secs int64) {
	if secs >= 0 && secs < int64(len(retryAfterValues)) {
		c.Writer.Header()["Retry-After"] = retryAfterValues[secs]
		return
	}
	c.Writer.Header()["Retry-After"] = []string{strconv.FormatInt(secs, 10)}
}

// writeJSON answers code with body, a JSON document, written straight to the
// connection (gin's c.Data boxes a renderer and allocates the Content-Type
// value per answer).
func writeJSON(c *gin.Context, code int, body []byte) {
	c.Writer.Header()["Content-Type"] = jsonTypeValue
	c.Status(code)
	_, _ = c.Writer.Write(body)
}
