package jsonstr

import "testing"

var sink []byte // keeps the result alive

// BenchmarkAppendToken quotes a queue token (about 300 bytes, all plain).
func BenchmarkAppendToken(b *testing.B) {
	tok := "eyJhbGciOiJIUzI1NiIsImtpZCI6InEtMSIsInR5cCI6IkpXVCJ9.eyJpdG0iOiJjZWlsaW5nLWJlbmNoIiwicCI6MCwibyI6MTIzNDUsImlzcyI6IndhaXRyb29tIiwic3ViIjoiYW5vbi1hYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5eiIsImF1ZCI6WyJxdWV1ZSJdLCJleHAiOjE3OTQ1MDAwMDAsImlhdCI6MTc5NDQwMDAwMCwianRpIjoiQUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVoifQ.c2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXI"
	buf := make([]byte, 0, 1024)
	for b.Loop() {
		sink = Append(buf[:0], tok)
	}
}
