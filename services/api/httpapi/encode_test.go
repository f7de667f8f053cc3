package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAnswersEncodeAsJSON(t *testing.T) {
	eta := int64(42)
	zero := int64(0)
	odd := "qu\"o\\te <b>&amp; é \x01\xff\u2028"
	for _, r := range []RegisterResponse{
		{},
		{Status: "QUEUED", ItemID: "concert-2026", UserID: "u-1", TokenID: "T", Token: "a.b.c", StatusURL: "/x/a.b.c", EventsURL: "/x/a.b.c/events"},
		{Status: odd, ItemID: odd, UserID: odd, TokenID: odd, Token: odd, StatusURL: odd, EventsURL: odd},
		{Status: "PRE_QUEUE", ItemID: "i", DrawAt: 1_800_000_000_000, OpensAt: 1_800_000_000_000},
		// The URLs carry the token (quoted once, copied): cut at ASCII, inside
		// a rune, between invalid bytes, beside escapes.
		{Token: "t.o.k", StatusURL: "/x/t.o.k", EventsURL: "/x/t.o.k/events"},
		{Token: odd, StatusURL: "/x/" + odd, EventsURL: "/x/" + odd + "/events"},
		{Token: "\x80é", StatusURL: "\xe2\x80\x80é", EventsURL: "\xe2\x80\x80é\xa8"},
		{Token: "\xa8<", StatusURL: "\xe2\x80\xa8<", EventsURL: "\xe2\x80\xa8<\x80"},
		{Token: "é", StatusURL: "é/é", EventsURL: "é/é"},
	} {
		want, err := json.Marshal(r)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(r.appendJSON(nil)))
	}
	for _, r := range []StatusResponse{
		{},
		{Status: "WAITING", ItemID: "i", UserID: "u", TokenID: "t", Position: 3, WaitingTotal: 9, EtaSeconds: &eta, PollAfterMs: 1000},
		{Status: "WAITING", EtaSeconds: &zero, Position: -1},
		{Status: "ADMITTED", ItemID: "i", UserID: odd, TokenID: "t", AdmissionToken: "x.y.z", ExpiresAt: "2026-11-24T21:00:00.123Z"},
		{Status: "PRE_QUEUE", ItemID: "i", PollAfterMs: 3000, DrawAt: 1_800_000_000_000, InDraw: 2000},
		{Status: "BLOCKED", ItemID: "i", Message: odd},
		{Status: "WAITING", ItemID: "i", Token: "n.e.w", Notice: odd, Position: 2},
		{Status: "WAITING", ItemID: "i", Position: 2, PollAfterMs: 1000, Cursor: "2.1800000000.AAAAAAAAAAAAAAAAAAAAAA"},
	} {
		want, err := json.Marshal(r)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(r.appendJSON(nil)))
	}
}

func FuzzRegisterResponseEncodesAsJSON(f *testing.F) {
	f.Add("QUEUED", "u-1", "a.b.c")
	f.Add("\xff<", "\u2028", "\"\\")
	f.Add("/events", "eyJ0.eyJ1.c2ln", "/api/v1/items/x/registrations/")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		for _, r := range []RegisterResponse{
			{Status: a, ItemID: b, UserID: c, TokenID: a, Token: b, StatusURL: c, EventsURL: a + b},
			{Token: b, StatusURL: c + b, EventsURL: c + b + a}, // a 202's shape: the token's quoting copied
			{Token: b, StatusURL: b + c, EventsURL: a + b + c},
		} {
			want, err := json.Marshal(r)
			require.NoError(t, err)
			if got := string(r.appendJSON(nil)); got != string(want) {
				t.Fatalf("got %s, want %s", got, want)
			}
		}
	})
}

func BenchmarkAnswerJSON(b *testing.B) {
	eta := int64(42)
	tok := "eyJhbGciOiJIUzI1NiIsImtpZCI6InEtMSIsInR5cCI6IkpXVCJ9.eyJpdG0iOiJjZWlsaW5nLWJlbmNoIiwicCI6MCwibyI6MTIzNDUsImlzcyI6IndhaXRyb29tIiwic3ViIjoiYW5vbi1hYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5eiIsImF1ZCI6WyJxdWV1ZSJdLCJleHAiOjE3OTQ1MDAwMDAsImlhdCI6MTc5NDQwMDAwMCwianRpIjoiQUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVoifQ.c2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXJlc2lnbmF0dXI"
	reg := RegisterResponse{Status: "QUEUED", ItemID: "concert-2026", UserID: "user-123456", TokenID: "01JD4Q6Y8X2T0Z5K3M7N9P1R2S",
		Token: tok, StatusURL: "/api/v1/items/concert-2026/registrations/" + tok, EventsURL: "/api/v1/items/concert-2026/registrations/" + tok + "/events"}
	st := StatusResponse{Status: "WAITING", ItemID: "concert-2026", UserID: "user-123456", TokenID: "01JD4Q6Y8X2T0Z5K3M7N9P1R2S",
		Position: 1234, WaitingTotal: 56789, EtaSeconds: &eta, PollAfterMs: 5000}
	buf := make([]byte, 0, 1024)
	b.Run("register/append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = reg.appendJSON(buf[:0])
		}
	})
	b.Run("register/encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(reg)
		}
	})
	b.Run("status/append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = st.appendJSON(buf[:0])
		}
	})
	b.Run("status/encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(st)
		}
	})
}
