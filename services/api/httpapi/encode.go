package httpapi

import (
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/httpserver"
)

// The register and status answers are built by appending, byte for byte what
// encoding/json writes for the structs (TestAnswersEncodeAsJSON), without
// reflection, into a pooled buffer.

const jsonType = "application/json; charset=utf-8"

func (r *RegisterResponse) appendJSON(b []byte) []byte {
	b = append(b, `{"status":`...)
	b = httpserver.AppendJSONString(b, r.Status)
	b = append(b, `,"itemId":`...)
	b = httpserver.AppendJSONString(b, r.ItemID)
	b = append(b, `,"userId":`...)
	b = httpserver.AppendJSONString(b, r.UserID)
	b = append(b, `,"tokenId":`...)
	b = httpserver.AppendJSONString(b, r.TokenID)
	b = append(b, `,"token":`...)
	b = httpserver.AppendJSONString(b, r.Token)
	b = append(b, `,"statusUrl":`...)
	b = httpserver.AppendJSONString(b, r.StatusURL)
	b = append(b, `,"eventsUrl":`...)
	b = httpserver.AppendJSONString(b, r.EventsURL)
	if r.DrawAt != 0 {
		b = append(b, `,"drawAt":`...)
		b = strconv.AppendInt(b, r.DrawAt, 10)
	}
	if r.OpensAt != 0 {
		b = append(b, `,"opensAt":`...)
		b = strconv.AppendInt(b, r.OpensAt, 10)
	}
	return append(b, '}')
}

func (r *StatusResponse) appendJSON(b []byte) []byte {
	b = append(b, `{"status":`...)
	b = httpserver.AppendJSONString(b, r.Status)
	b = append(b, `,"itemId":`...)
	b = httpserver.AppendJSONString(b, r.ItemID)
	b = append(b, `,"userId":`...)
	b = httpserver.AppendJSONString(b, r.UserID)
	b = append(b, `,"tokenId":`...)
	b = httpserver.AppendJSONString(b, r.TokenID)
	if r.Position != 0 {
		b = append(b, `,"position":`...)
		b = strconv.AppendInt(b, r.Position, 10)
	}
	if r.WaitingTotal != 0 {
		b = append(b, `,"waitingTotal":`...)
		b = strconv.AppendInt(b, r.WaitingTotal, 10)
	}
	if r.EtaSeconds != nil {
		b = append(b, `,"etaSeconds":`...)
		b = strconv.AppendInt(b, *r.EtaSeconds, 10)
	}
	if r.AdmissionToken != "" {
		b = append(b, `,"admissionToken":`...)
		b = httpserver.AppendJSONString(b, r.AdmissionToken)
	}
	if r.ExpiresAt != "" {
		b = append(b, `,"expiresAt":`...)
		b = httpserver.AppendJSONString(b, r.ExpiresAt)
	}
	if r.PollAfterMs != 0 {
		b = append(b, `,"pollAfterMs":`...)
		b = strconv.AppendInt(b, r.PollAfterMs, 10)
	}
	if r.Message != "" {
		b = append(b, `,"message":`...)
		b = httpserver.AppendJSONString(b, r.Message)
	}
	if r.DrawAt != 0 {
		b = append(b, `,"drawAt":`...)
		b = strconv.AppendInt(b, r.DrawAt, 10)
	}
	if r.InDraw != 0 {
		b = append(b, `,"inDraw":`...)
		b = strconv.AppendInt(b, r.InDraw, 10)
	}
	return append(b, '}')
}

// writeJSON answers code with what appendJSON appends.
func writeJSON(c *gin.Context, code int, appendJSON func([]byte) []byte) {
	buf := httpserver.Buffer()
	*buf = appendJSON(*buf)
	c.Data(code, jsonType, *buf)
	httpserver.PutBuffer(buf)
}
