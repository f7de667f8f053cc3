package topics

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEncodeRegistrationIsEncodingJSONs(t *testing.T) {
	for _, e := range []RegistrationEvent{
		{V: Version, Kind: KindRegister, TokenID: "JBSWY3DPEHPK3PXPJBSWY3DPEH", ItemID: "concert-2026", UserID: "anon-x",
			RequestedAt: 1800000000000, Client: &ClientMeta{IP: "203.0.113.0/24", UserAgent: "Mozilla/5.0 (X11) <b>&amp;</b>"},
			Window: 17, Holder: HolderToken},
		{V: Version, Kind: KindLeave, ItemID: "i", UserID: "\"quoted\\\" \x00\x1f\x7f\b\f\n\r\t", Client: &ClientMeta{}},
		{V: Version, Kind: KindRegister, UserID: "é\u2028\u2029\xff\xc3(€", Client: &ClientMeta{UserAgent: "only"},
			Bypass: &BypassUse{Code: "c<1>", Count: 3, ExpiresAt: -1}, Holder: HolderUser},
		{V: 2, Kind: KindDraw, ItemID: "i", RequestedAt: -5, Draw: &Draw{Window: 1, Round: 2, Seed: "ab", Commit: "cd"}},
		{},
	} {
		want, err := json.Marshal(&e)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(EncodeRegistration(&e)))
	}
}

// FuzzEncodeRegistrationAgrees holds the hand-written encoder to
// encoding/json: for any strings and integers, the same bytes.
func FuzzEncodeRegistrationAgrees(f *testing.F) {
	f.Add(1, "register", "T", "i", "u", int64(1), true, "1.2.3.0/24", "ua", int64(5), false, "", int64(0), "token")
	f.Add(1, "leave", "<&>", "\u2028", "\xff\xfe", int64(-1), true, "", "", int64(0), true, "c\"\\", int64(-9), "")
	f.Add(0, "", "\x00\x1f\x7f", "é€𝄞", "\t\n\r\b\f", int64(1<<62), false, "", "", int64(-1<<62), false, "", int64(0), "user")
	f.Fuzz(func(t *testing.T, v int, kind, tokenID, itemID, userID string, at int64, client bool, ip, ua string,
		window int64, bypass bool, code string, count int64, holder string) {
		e := RegistrationEvent{V: v, Kind: kind, TokenID: tokenID, ItemID: itemID, UserID: userID, RequestedAt: at,
			Window: window, Holder: holder}
		if client {
			e.Client = &ClientMeta{IP: ip, UserAgent: ua}
		}
		if bypass {
			e.Bypass = &BypassUse{Code: code, Count: count, ExpiresAt: at}
			e.Draw = &Draw{Window: window, Round: count, Seed: ip, Commit: ua}
		}
		want, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		if got := EncodeRegistration(&e); string(got) != string(want) {
			t.Fatalf("%+v:\nhand    %s\nlibrary %s", e, got, want)
		}
	})
}

// BenchmarkEncodeRegistration encodes the record the api writes for a
// registration: "fast" is EncodeRegistration, "library" encoding/json, in
// the same run.
func BenchmarkEncodeRegistration(b *testing.B) {
	e := &RegistrationEvent{V: Version, Kind: KindRegister, TokenID: "JBSWY3DPEHPK3PXPJBSWY3DPEH", ItemID: "concert-2026",
		UserID: "anon-jbswy3dpehpk3pxpjbswy3dpeh", RequestedAt: 1800000000000,
		Client: &ClientMeta{IP: "203.0.113.0/24", UserAgent: "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"},
		Holder: HolderToken}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = EncodeRegistration(e)
		}
	})
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = Encode(e)
		}
	})
}
