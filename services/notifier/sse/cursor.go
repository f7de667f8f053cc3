package sse

import (
	"strconv"
	"strings"

	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/fieldmac"
)

// A cursor lets a stream reopen without reading Redis. It rides in the
// event id after the progress ("<progress>.<seq>.<refHead>.<refPos>.<mac>"),
// so EventSource hands it back in Last-Event-ID on its own reconnect. It
// carries the place's seq and the exact position read with a head (what
// registration.Position estimates from); its MAC binds those to the item,
// the queue token's tokenId and the view's generation in memory, so it
// cannot be moved to another place, and a view or item rebuilt since makes
// it stale (the open then reads Redis as before). The queue token still
// decides which place: the cursor only saves the read of it.
type cursor struct {
	seq, refHead, refPos int64
}

// cursorPurpose names the stream cursor's key among those derived from
// one secret (fieldmac.KeyOf).
const cursorPurpose = "waitroom stream cursor v1"

// cursorKeyOf derives the cursor key from a secret every replica holds, so a
// cursor one replica issued opens on another.
func cursorKeyOf(secret string) []byte { return fieldmac.KeyOf(secret, cursorPurpose) }

// SetCursorKey sets the key cursors are signed with (every replica the same
// key; by default a random one, good on this replica only). Call before serving.
func (s *Server) SetCursorKey(k []byte) { s.cursors = fieldmac.New(k) }

// issueCursor is the cursor of c for the item and token (without the
// progress before it); "" when there is nothing to resume from.
func (s *Server) issueCursor(item, tokenID string, c cursor) string {
	if c.seq <= 0 || c.refPos <= 0 {
		return ""
	}
	b := make([]byte, 0, 64)
	b = strconv.AppendInt(b, c.seq, 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, c.refHead, 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, c.refPos, 10)
	b = append(b, '.')
	gen := s.itemGen(item)
	b = s.cursors.Append(b, []string{item, tokenID, gen.View, gen.Item}, []int64{c.seq, c.refHead, c.refPos})
	return string(b)
}

// checkCursor parses raw (the part of Last-Event-ID after the progress) and
// checks its MAC for item, tokenID and the view's generation now; false:
// missing, malformed, forged, another token's or stale.
func (s *Server) checkCursor(item, tokenID, raw string) (cursor, bool) {
	f := strings.Split(raw, ".")
	if len(f) != 4 {
		return cursor{}, false
	}
	var n [3]int64
	for i := range n {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || v < 0 {
			return cursor{}, false
		}
		n[i] = v
	}
	c := cursor{seq: n[0], refHead: n[1], refPos: n[2]}
	if c.seq <= 0 || c.refPos <= 0 || c.refHead >= c.seq || c.refPos > c.seq-c.refHead {
		return cursor{}, false
	}
	gen := s.itemGen(item)
	if !s.cursors.Check(f[3], []string{item, tokenID, gen.View, gen.Item}, []int64{c.seq, c.refHead, c.refPos}) {
		return cursor{}, false
	}
	return c, true
}

// itemGen is the generation of item's answers held in memory (zero without a view).
func (s *Server) itemGen(item string) view.ItemGen {
	if s.view == nil {
		return view.ItemGen{}
	}
	return s.view.ItemGen(item)
}
