// Package jsonstr quotes strings exactly as encoding/json does, without its
// reflection: the hot paths (queue tokens, the api's answers) build JSON by
// appending.
package jsonstr

import (
	"encoding/json"
	"strings"
)

// plain marks the bytes encoding/json copies into a string as they are.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// Append appends s quoted exactly as encoding/json quotes it (HTML
// characters escaped, invalid UTF-8 replaced): printable ASCII is copied,
// anything else goes through json.Marshal.
func Append(b []byte, s string) []byte {
	for i := plainPrefix(s); i < len(s); i++ {
		if !plain[s[i]] {
			// A copy boxed, not s: s then never escapes, nor does
			// what an answer built from it points to.
			q, _ := json.Marshal(strings.Clone(s)) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Eight bytes at a time: lo has 0x01 and hi 0x80 in every byte.
const (
	lo = 0x0101010101010101
	hi = 0x8080808080808080
)

// plainPrefix returns a length, a multiple of 8, of s's start in which every
// byte is plain, looking at eight bytes per step (about 1.5x the byte loop's
// speed on a queue token, ~300 bytes, which a registration quotes three
// times); Append looks at the rest byte by byte. Each test below is exact as
// a yes or no for the whole word (the bit tricks' false positives only flag
// bytes above a true one).
func plainPrefix(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := s[i : i+8]
		x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		bad := x&hi | // a byte >= 0x80
			(x-lo*0x20)&^x&hi | // a byte < 0x20
			zeroByte(x^(lo*'"')) | zeroByte(x^(lo*'\\')) | zeroByte(x^(lo*'<')) |
			zeroByte(x^(lo*'>')) | zeroByte(x^(lo*'&')) | zeroByte(x^(lo*0x7f))
		if bad != 0 {
			break
		}
	}
	return i
}

// zeroByte is not 0 when a byte of v is 0.
func zeroByte(v uint64) uint64 { return (v - lo) & ^v & hi }
