package topics

import (
	"strconv"
	"unicode/utf8"
)

// The registration record is encoded by appending, without reflection: the
// api writes one per registration. The bytes are exactly encoding/json's for
// the struct (field order, omitempty, HTML-safe escaping, invalid UTF-8 as
// U+FFFD); FuzzEncodeRegistrationAgrees holds the two to the same output.

// EncodeRegistration is Encode(e) for a registration record, in one
// allocation.
func EncodeRegistration(e *RegistrationEvent) []byte {
	return AppendRegistration(make([]byte, 0, RegistrationSize(e)), e)
}

// RegistrationSize is room enough for e's JSON unless its strings need
// escaping (then appending grows the buffer, as append does).
func RegistrationSize(e *RegistrationEvent) int {
	n := 128 + len(e.Kind) + len(e.TokenID) + len(e.ItemID) + len(e.UserID) + len(e.Holder)
	if e.Client != nil {
		n += 32 + len(e.Client.IP) + len(e.Client.UserAgent)
	}
	if e.Bypass != nil {
		n += 64 + len(e.Bypass.Code)
	}
	if e.Draw != nil {
		n += 80 + len(e.Draw.Seed) + len(e.Draw.Commit)
	}
	return n
}

// AppendRegistration appends e's JSON, as encoding/json writes it, to b.
func AppendRegistration(b []byte, e *RegistrationEvent) []byte {
	b = strconv.AppendInt(append(b, `{"v":`...), int64(e.V), 10)
	b = appendQuoted(append(b, `,"kind":`...), e.Kind)
	b = appendQuoted(append(b, `,"tokenId":`...), e.TokenID)
	b = appendQuoted(append(b, `,"itemId":`...), e.ItemID)
	b = appendQuoted(append(b, `,"userId":`...), e.UserID)
	b = strconv.AppendInt(append(b, `,"requestedAt":`...), e.RequestedAt, 10)
	if c := e.Client; c != nil {
		b = append(b, `,"client":{`...)
		sep := ""
		if c.IP != "" {
			b = appendQuoted(append(b, `"ip":`...), c.IP)
			sep = ","
		}
		if c.UserAgent != "" {
			b = appendQuoted(append(append(b, sep...), `"userAgent":`...), c.UserAgent)
		}
		b = append(b, '}')
	}
	if e.Window != 0 {
		b = strconv.AppendInt(append(b, `,"window":`...), e.Window, 10)
	}
	if u := e.Bypass; u != nil {
		b = appendQuoted(append(b, `,"bypass":{"code":`...), u.Code)
		b = strconv.AppendInt(append(b, `,"count":`...), u.Count, 10)
		b = strconv.AppendInt(append(b, `,"expiresAt":`...), u.ExpiresAt, 10)
		b = append(b, '}')
	}
	if d := e.Draw; d != nil {
		b = strconv.AppendInt(append(b, `,"draw":{"window":`...), d.Window, 10)
		b = strconv.AppendInt(append(b, `,"round":`...), d.Round, 10)
		b = appendQuoted(append(b, `,"seed":`...), d.Seed)
		b = appendQuoted(append(b, `,"commit":`...), d.Commit)
		b = append(b, '}')
	}
	if e.Holder != "" {
		b = appendQuoted(append(b, `,"holder":`...), e.Holder)
	}
	return append(b, '}')
}

// copied marks the ASCII bytes encoding/json copies into a string as they
// are (its htmlSafeSet): 0x20 to 0x7f but a quote, a backslash, <, > and &.
var copied = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ { // DEL (0x7f) too, as encoding/json
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// appendQuoted appends s quoted as encoding/json quotes a string with HTML
// escaping on (its default): control bytes, quote, backslash, <, > and &
// escaped, U+2028 and U+2029 escaped, each invalid UTF-8 byte as \ufffd.
func appendQuoted(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if copied[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default: // the other control bytes, <, > and &
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}
