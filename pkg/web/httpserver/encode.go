package httpserver

import (
	"sync"

	"github.com/waitroom/waitroom/pkg/foundation/jsonstr"
)

// AppendJSONString appends s quoted exactly as encoding/json quotes it
// (jsonstr.Append). Hot-path answers are built with it instead of reflection.
func AppendJSONString(b []byte, s string) []byte { return jsonstr.Append(b, s) }

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
