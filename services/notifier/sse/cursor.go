package sse

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"strconv"
	"strings"

	"github.com/waitroom/waitroom/pkg/redisview/view"
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

// cursorMACLen is the MAC's length in bytes (128 bits, 22 characters).
const cursorMACLen = 16

// newCursorKey is a random key: cursors then work on this replica only.
// Run's notifier derives a shared one from the admission key (cursorKeyOf).
func newCursorKey() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return k
}

// cursorKeyOf derives the cursor key from a secret every replica holds, so a
// cursor one replica issued opens on another.
func cursorKeyOf(secret string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("waitroom stream cursor v1"))
	return m.Sum(nil)
}

// SetCursorKey sets the key cursors are signed with (every replica the same
// key; by default a random one, good on this replica only). Call before serving.
func (s *Server) SetCursorKey(k []byte) { s.cursorKey = k }

// macState is a keyed HMAC and its scratch buffers, reused through
// Server.macs: hmac.New costs two SHA-256 blocks for the key's pads and four
// allocations, and Reset returns a used one to its keyed state without them.
type macState struct {
	key []byte
	h   hash.Hash
	msg []byte
	sum []byte
}

// cursorMAC is the MAC of c for item, tokenID and gen.
func (s *Server) cursorMAC(item, tokenID string, gen view.ItemGen, c cursor) [cursorMACLen]byte {
	m, _ := s.macs.Get().(*macState)
	if m == nil || !bytes.Equal(m.key, s.cursorKey) { // none yet, or the key changed (SetCursorKey)
		m = &macState{key: s.cursorKey, h: hmac.New(sha256.New, s.cursorKey), msg: make([]byte, 0, 128), sum: make([]byte, 0, sha256.Size)}
	} else {
		m.h.Reset()
	}
	b := m.msg[:0]
	for _, f := range [...]string{item, tokenID, gen.View, gen.Item} {
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
	}
	for _, n := range [...]int64{c.seq, c.refHead, c.refPos} {
		b = append(b, '|')
		b = strconv.AppendInt(b, n, 10)
	}
	m.h.Write(b)
	var mac [cursorMACLen]byte
	copy(mac[:], m.h.Sum(m.sum[:0]))
	m.msg = b
	s.macs.Put(m)
	return mac
}

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
	mac := s.cursorMAC(item, tokenID, s.itemGen(item), c)
	b = base64.RawURLEncoding.AppendEncode(b, mac[:])
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
	mac, err := base64.RawURLEncoding.DecodeString(f[3])
	if err != nil || len(mac) != cursorMACLen {
		return cursor{}, false
	}
	if want := s.cursorMAC(item, tokenID, s.itemGen(item), c); !hmac.Equal(mac, want[:]) {
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
