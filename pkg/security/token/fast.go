package token

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/waitroom/waitroom/pkg/foundation/jsonstr"
	"github.com/waitroom/waitroom/topics"
)

// The hot path of queue tokens (every registration issues one, every status
// read parses one) without golang-jwt's reflection and maps. It is exact, not
// lenient: a token whose header is not byte for byte the one this Signer
// writes (algorithm and key id pinned), or whose claims are not in the flat
// shape IssueQueue writes, goes to golang-jwt's parser instead
// (parseQueueLib), so every token either path accepts passes the same checks:
// signature first, then expiry (required), issued-at and issuer, then the
// audience and the claims ParseQueue needs. FuzzParseQueueFastAgrees holds the
// two paths to the same answers.

// leeway is the clock skew allowed on exp and iat, as in the library parser.
const leeway = 5 * time.Second

var (
	b64       = base64.RawURLEncoding
	b64Strict = base64.RawURLEncoding.Strict()
)

// scratch is the working memory of one issue or parse: pooled, because what
// goes through hash.Hash's interface methods escapes to the heap.
type scratch struct {
	in   [4096]byte
	body [3072]byte
	sig  [ed25519.SignatureSize]byte
	sum  [sha256.Size]byte
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// mac is the Signer's keyed hash: a pool of HMAC-SHA256 states for HS256
// (hmac.New allocates about 700 bytes), or the Ed25519 keys for EdDSA.
type mac struct {
	hs   *sync.Pool
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
}

func newMAC(alg string, sign, verify any) mac {
	switch alg {
	case HS256:
		key := sign.([]byte)
		return mac{hs: &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}}
	case EdDSA:
		return mac{priv: sign.(ed25519.PrivateKey), pub: verify.(ed25519.PublicKey)}
	}
	return mac{} // ES256: admission tokens only, through golang-jwt
}

// usable reports whether the fast path can sign and verify (HS256, EdDSA).
func (m mac) usable() bool { return m.hs != nil || m.pub != nil }

// appendSig appends the signature of input to dst.
func (m mac) appendSig(dst, input []byte) []byte {
	if m.hs != nil {
		h := m.hs.Get().(hash.Hash)
		h.Reset()
		h.Write(input)
		dst = h.Sum(dst)
		m.hs.Put(h)
		return dst
	}
	return append(dst, ed25519.Sign(m.priv, input)...)
}

// verify reports whether sig is input's signature, in constant time for HMAC;
// sum is room for the HMAC.
func (m mac) verify(input, sig []byte, sum *[sha256.Size]byte) bool {
	if m.hs != nil {
		h := m.hs.Get().(hash.Hash)
		h.Reset()
		h.Write(input)
		out := h.Sum(sum[:0])
		m.hs.Put(h)
		return hmac.Equal(out, sig)
	}
	return len(sig) == ed25519.SignatureSize && ed25519.Verify(m.pub, input, sig)
}

// appendQueueClaims appends the JSON of wireQueueClaims, byte for byte what
// json.Marshal writes for it (TestAppendQueueClaimsIsMarshal).
func appendQueueClaims(b []byte, q Queue, exp, iat int64) []byte {
	b = append(b, `{"itm":`...)
	b = jsonstr.Append(b, q.ItemID)
	b = append(b, `,"p":`...)
	b = strconv.AppendInt(b, int64(q.Partition), 10)
	b = append(b, `,"o":`...)
	b = strconv.AppendInt(b, q.Offset, 10)
	if q.Holder != "" {
		b = append(b, `,"h":`...)
		b = jsonstr.Append(b, q.Holder)
	}
	b = append(b, `,"iss":"`+issuer+`","sub":`...)
	b = jsonstr.Append(b, q.UserID)
	b = append(b, `,"aud":["`+audienceQueue+`"],"exp":`...)
	b = strconv.AppendInt(b, exp, 10)
	b = append(b, `,"iat":`...)
	b = strconv.AppendInt(b, iat, 10)
	b = append(b, `,"jti":`...)
	b = jsonstr.Append(b, q.TokenID)
	return append(b, '}')
}

// appendQueueFast is AppendQueue: it grows dst once, to the token's length.
func (s *Signer) appendQueueFast(dst []byte, q Queue, ttl time.Duration) []byte {
	now := s.now()
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	body := appendQueueClaims(sc.body[:0], q, now.Add(ttl).Unix(), now.Unix())
	at := len(dst)
	dst = slices.Grow(dst, len(s.header)+1+b64.EncodedLen(len(body))+1+b64.EncodedLen(ed25519.SignatureSize))
	dst = append(dst, s.header...)
	dst = append(dst, '.')
	dst = b64.AppendEncode(dst, body)
	dst = append(dst, '.')
	return b64.AppendEncode(dst, s.mac.appendSig(sc.sig[:0], dst[at:len(dst)-1]))
}

// fastResult is the fast path's verdict; fastFallback: the library decides.
type fastResult int

const (
	fastFallback fastResult = iota
	fastOK
	fastInvalid
	fastExpired
)

// parseQueueFast verifies raw (at most 4096 bytes) when it has this Signer's
// header and IssueQueue's claim shape. fastFallback: the library decides.
func (s *Signer) parseQueueFast(raw string) (Queue, fastResult) {
	if len(raw) <= len(s.header) || raw[:len(s.header)] != s.header || raw[len(s.header)] != '.' {
		return Queue{}, fastFallback
	}
	rest := raw[len(s.header)+1:]
	dot := -1
	for i := 0; i < len(rest); i++ {
		if rest[i] == '.' {
			dot = i
			break
		}
	}
	if dot < 0 {
		return Queue{}, fastFallback
	}
	sc := scratches.Get().(*scratch)
	defer scratches.Put(sc)
	in := sc.in[:]
	n := copy(in, raw)
	input := in[:len(s.header)+1+dot]
	payload := in[len(s.header)+1 : len(input)]
	sigPart := in[len(input)+1 : n]
	if b64.DecodedLen(len(sigPart)) > len(sc.sig) || b64.DecodedLen(len(payload)) > len(sc.body) {
		return Queue{}, fastFallback
	}
	sn, err := b64Strict.Decode(sc.sig[:], sigPart)
	if err != nil {
		return Queue{}, fastFallback
	}
	body := sc.body[:]
	bn, err := b64Strict.Decode(body, payload)
	if err != nil {
		return Queue{}, fastFallback
	}
	c, ok := scanQueueClaims(body[:bn])
	if !ok {
		return Queue{}, fastFallback
	}
	if !s.mac.verify(input, sc.sig[:sn], &sc.sum) {
		return Queue{}, fastInvalid
	}
	now := s.now()
	switch {
	case !c.hasExp:
		return Queue{}, fastInvalid
	case !now.Before(time.Unix(c.exp, 0).Add(leeway)):
		return Queue{}, fastExpired
	case c.hasIat && now.Before(time.Unix(c.iat, 0).Add(-leeway)):
		return Queue{}, fastInvalid
	case string(c.iss) != issuer, c.aud != 1, len(c.jti) == 0, len(c.itm) == 0, len(c.sub) == 0, c.o < 0, c.p < 0:
		return Queue{}, fastInvalid
	}
	// One allocation holds the three strings.
	ab := append(append(append(make([]byte, 0, len(c.jti)+len(c.itm)+len(c.sub)), c.jti...), c.itm...), c.sub...)
	all := unsafe.String(unsafe.SliceData(ab), len(ab)) // ab is never written again
	j, i := len(c.jti), len(c.jti)+len(c.itm)
	q := Queue{TokenID: all[:j], ItemID: all[j:i], UserID: all[i:], Holder: holderOf(c.h), Partition: int32(c.p), Offset: c.o, ExpiresAt: time.Unix(c.exp, 0)}
	if c.hasIat {
		q.IssuedAt = time.Unix(c.iat, 0)
	}
	return q, fastOK
}

// holderOf is a scanned holder claim as a string, without allocating for the
// two values IssueQueue writes (anything else stays as it was signed).
func holderOf(h []byte) string {
	switch string(h) {
	case "":
		return ""
	case topics.HolderToken:
		return topics.HolderToken
	case topics.HolderUser:
		return topics.HolderUser
	}
	return string(h)
}

// scanned holds what scanQueueClaims read; strings point into the payload.
type scanned struct {
	itm, sub, jti, iss, h []byte
	p, o, exp, iat        int64
	hasExp, hasIat        bool
	aud                   int // 1: exactly ["waitroom-queue"]; 0: absent; 2: anything else
}

// scanQueueClaims reads a flat JSON object with the keys IssueQueue writes,
// in any order (a repeated key: the last wins, as in encoding/json). It
// refuses (false, the library decides) anything else: another key, a key in
// other case, an escape in a string, a number that is not a plain integer of
// at most 15 digits, null, or an aud that is not an array of plain strings.
func scanQueueClaims(b []byte) (scanned, bool) {
	var c scanned
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return c, false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return c, skipWS(b, i+1) == len(b)
	}
	for {
		key, j, ok := scanString(b, i)
		if !ok {
			return c, false
		}
		i = skipWS(b, j)
		if i >= len(b) || b[i] != ':' {
			return c, false
		}
		i = skipWS(b, i+1)
		switch string(key) {
		case "itm", "sub", "jti", "iss", "h":
			v, j, ok := scanString(b, i)
			if !ok {
				return c, false
			}
			switch string(key) {
			case "itm":
				c.itm = v
			case "sub":
				c.sub = v
			case "jti":
				c.jti = v
			case "iss":
				c.iss = v
			case "h":
				c.h = v
			}
			i = j
		case "p", "o", "exp", "iat":
			v, j, ok := scanInt(b, i)
			if !ok {
				return c, false
			}
			switch string(key) {
			case "p":
				if v < -1<<31 || v > 1<<31-1 {
					return c, false
				}
				c.p = v
			case "o":
				c.o = v
			case "exp":
				c.exp, c.hasExp = v, true
			case "iat":
				c.iat, c.hasIat = v, true
			}
			i = j
		case "aud":
			aud, j, ok := scanAud(b, i)
			if !ok {
				return c, false
			}
			c.aud, i = aud, j
		default:
			return c, false
		}
		i = skipWS(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			return c, skipWS(b, i+1) == len(b)
		}
		return c, false
	}
}

// scanAud reads the aud array at b[i]: 1 when it is exactly the queue
// audience, 2 when it is any other array of plain strings; false otherwise.
func scanAud(b []byte, i int) (aud int, next int, ok bool) {
	if i >= len(b) || b[i] != '[' {
		return 0, i, false
	}
	i = skipWS(b, i+1)
	n, match := 0, false
	if i < len(b) && b[i] == ']' {
		i++
	} else {
		for {
			v, j, ok := scanString(b, i)
			if !ok {
				return 0, i, false
			}
			n++
			match = string(v) == audienceQueue
			i = skipWS(b, j)
			if i < len(b) && b[i] == ',' {
				i = skipWS(b, i+1)
				continue
			}
			if i < len(b) && b[i] == ']' {
				i++
				break
			}
			return 0, i, false
		}
	}
	if n == 1 && match {
		return 1, i, true
	}
	return 2, i, true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString reads a string of printable ASCII without escapes at b[i].
func scanString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, i, false
		}
	}
	return nil, i, false
}

// scanInt reads an integer of 1 to 15 digits, optionally negative, at b[i],
// as JSON writes it (no leading zero but 0 itself).
func scanInt(b []byte, i int) (int64, int, bool) {
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	start := i
	var v int64
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		v = v*10 + int64(b[i]-'0')
		i++
	}
	d := i - start
	if d == 0 || d > 15 || (d > 1 && b[start] == '0') {
		return 0, i, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, i, false
	}
	if neg {
		v = -v
	}
	return v, i, true
}
