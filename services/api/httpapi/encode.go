package httpapi

import (
	"strconv"
	"strings"
	"unicode/utf8"

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
	b, tok := quoted(b, `,"token":`, r.Token)
	b, url := quotedAfter(b, `,"statusUrl":`, r.StatusURL, r.Token, tok)
	b, _ = quotedAfter(b, `,"eventsUrl":`, r.EventsURL, r.StatusURL, url)
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

// quoted is field that also returns where v's quoted bytes (between the
// quotes) are in the result.
func quoted(b []byte, key, v string) ([]byte, [2]int) {
	b = append(b, key...)
	at := len(b) + 1
	b = httpserver.AppendJSONString(b, v)
	return b, [2]int{at, len(b) - 1}
}

// quotedAfter is quoted for v, where inner (already quoted in b at q) may
// end or start v: the 202's status URL ends with its token and starts its
// events URL. Then only the rest of v is quoted and inner's quoted bytes are
// copied (a token is ~370 bytes). encoding/json quotes rune by rune, so
// quoting the parts gives the whole's quoting when no rune spans a cut
// (asciiCut).
func quotedAfter(b []byte, key, v, inner string, q [2]int) ([]byte, [2]int) {
	i := -1
	switch {
	case inner == "":
	case strings.HasSuffix(v, inner):
		i = len(v) - len(inner)
	case strings.HasPrefix(v, inner):
		i = 0
	}
	if i < 0 || !asciiCut(v, i) || !asciiCut(v, i+len(inner)) {
		return quoted(b, key, v)
	}
	b = append(b, key...)
	at := len(b) + 1
	b = httpserver.AppendJSONString(b, v[:i])
	b = append(b[:len(b)-1], b[q[0]:q[1]]...) // the start's closing quote dropped
	n := len(b)
	b = httpserver.AppendJSONString(b, v[i+len(inner):])
	b = append(b[:n], b[n+1:]...) // the rest's opening quote dropped
	return b, [2]int{at, len(b) - 1}
}

// asciiCut reports whether cutting s at i splits no rune, however s decodes:
// a byte below utf8.RuneSelf on either side of the cut is a rune of its own
// and ends any invalid sequence before it, which encoding/json replaces byte
// by byte.
func asciiCut(s string, i int) bool {
	return i == 0 || i == len(s) || s[i-1] < utf8.RuneSelf || s[i] < utf8.RuneSelf
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
