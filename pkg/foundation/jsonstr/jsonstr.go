// Package jsonstr quotes strings exactly as encoding/json does, without its
// reflection: the hot paths (queue tokens, the api's answers) build JSON by
// appending.
package jsonstr

import "encoding/json"

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
	for i := 0; i < len(s); i++ {
		if !plain[s[i]] {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
