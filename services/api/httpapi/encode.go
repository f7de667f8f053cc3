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

// writeJSON answers code with what appendJSON appends.
func writeJSON(c *gin.Context, code int, appendJSON func([]byte) []byte) {
	buf := httpserver.Buffer()
	*buf = appendJSON(*buf)
	c.Data(code, jsonType, *buf)
	httpserver.PutBuffer(buf)
}
