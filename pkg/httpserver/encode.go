package httpserver

import (
	"encoding/json"
	"sync"
)

// plainJSON marks the bytes encoding/json copies into a string as they are.
var plainJSON = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// AppendJSONString appends s quoted exactly as encoding/json quotes it (HTML
// characters escaped, invalid UTF-8 replaced): printable ASCII is copied,
// anything else goes through json.Marshal. Hot-path answers are built with it
// instead of reflection.
func AppendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plainJSON[s[i]] {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Buffer returns a pooled buffer for an answer; give it back with PutBuffer
// once the answer is written.
func Buffer() *[]byte {
	b := buffers.Get().(*[]byte)
	*b = (*b)[:0]
	return b
}

// PutBuffer returns b to the pool (a buffer grown past 64 KiB is dropped).
func PutBuffer(b *[]byte) {
	if cap(*b) <= 64<<10 {
		buffers.Put(b)
	}
}
