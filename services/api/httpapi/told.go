package httpapi

import (
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/security/fieldmac"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
)

// A status cursor is what the api told a waiting token, signed, so the next
// answer, from whichever replica, never tells it a larger position: replicas
// answer repeated reads from estimates of their own (positions), and a poller
// behind a front door alternates them. The answer carries it in "cursor"
// ("<position>.<unix s issued>.<mac>", 30-odd characters), the client sends
// it back as ?cursor=, and the api answers min(what it computed, the
// cursor's position). Its MAC binds the position to the item and the
// tokenId, under a key every api derives from WR_ADMISSION_KEY: a cursor of
// another token, forged or older than cursorMaxAge is ignored, never
// refused, and no cursor is today's answer. Nothing is stored per read.
//
// A cursor outlives a rebuild of the view or the item. A rebuild can put a
// person back in line ahead of this token (an admission decided in the lost
// Redis but never published), so the exact position after it may be larger
// than what was told; the answer then stays at the told position until the
// line has moved past it, as a client is never told it went back.
const (
	cursorParam   = "cursor"
	cursorPurpose = "waitroom status cursor v2"
	// cursorMaxAge bounds how long a told position holds (either way: the
	// replicas' clocks may differ). A poller reads every 30 s at most
	// (registration.PollAfter); a client back after longer is told anew.
	cursorMaxAge = 10 * time.Minute
)

// StatusCursorKey derives the key status cursors are signed with from a
// secret every api replica holds (the admission key).
func StatusCursorKey(secret string) []byte { return fieldmac.KeyOf(secret, cursorPurpose) }

// cursorOf is the request's cursor parameter (c.Query's answer, without
// parsing the whole query into a map).
func cursorOf(c *gin.Context) string {
	return httpserver.QueryValue(c.Request.URL.RawQuery, cursorParam)
}

// told bounds pos, the position computed for a waiting token, by the
// client's cursor raw (when valid for item and tokenID), and returns the
// position to tell with its cursor, issued at now (the answer's clock).
func (s *Server) told(raw, item, tokenID string, pos int64, at time.Time) (int64, string) {
	now := at.Unix()
	if c, ok := s.checkCursor(raw, item, tokenID, now); ok && c < pos {
		s.m.cursorBounded.Inc()
		pos = c
	}
	return pos, s.issueCursor(item, tokenID, pos, now)
}

// issueCursor is the cursor of position pos told at now (unix s).
func (s *Server) issueCursor(item, tokenID string, pos, now int64) string {
	b := make([]byte, 0, 48)
	b = strconv.AppendInt(b, pos, 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, now, 10)
	b = append(b, '.')
	b = s.cursors.Append(b, []string{item, tokenID}, []int64{pos, now})
	return string(b)
}

// checkCursor is the position raw tells, when raw is a cursor issued for
// item and tokenID within cursorMaxAge of now; false: none, malformed,
// forged, another token's or too old.
func (s *Server) checkCursor(raw, item, tokenID string, now int64) (int64, bool) {
	if raw == "" || len(raw) > 64 {
		return 0, false
	}
	ps, rest, ok := strings.Cut(raw, ".")
	if !ok {
		return 0, false
	}
	ts, mac, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	pos, err := strconv.ParseInt(ps, 10, 64)
	if err != nil || pos <= 0 {
		return 0, false
	}
	at, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || at <= 0 {
		return 0, false
	}
	if age, most := now-at, int64(cursorMaxAge/time.Second); age > most || age < -most {
		return 0, false
	}
	if !s.cursors.Check(mac, []string{item, tokenID}, []int64{pos, at}) {
		return 0, false
	}
	return pos, true
}
