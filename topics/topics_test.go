package topics

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidID(t *testing.T) {
	for _, ok := range []string{"a", "A-z_0.9:x", strings.Repeat("a", MaxIDLen)} {
		assert.True(t, ValidID(ok), ok)
	}
	for _, bad := range []string{"", " ", "a b", "a{b}", "a/b", "é", strings.Repeat("a", MaxIDLen+1), "a\x00"} {
		assert.False(t, ValidID(bad), bad)
	}
}

func TestItemIDProblem(t *testing.T) {
	for _, c := range []struct{ id, want string }{
		{"tix", ""},
		{"View", ""}, // Redis keys are case-sensitive: wr:{View}:… is nobody else's
		{"views", ""},
		{"view", `itemId "view" is reserved: its Redis keys wr:{view}:… are the view marker's`},
		{"", "itemId must be " + IDRule},
		{"a{b}", "itemId must be " + IDRule},
		{strings.Repeat("a", MaxIDLen+1), "itemId must be " + IDRule},
	} {
		assert.Equal(t, c.want, ItemIDProblem(c.id), "%q", c.id)
	}
}

func TestDecodeRegistration(t *testing.T) {
	good := RegistrationEvent{V: 1, Kind: KindRegister, TokenID: "T", ItemID: "i", UserID: "u", RequestedAt: 5,
		Client: &ClientMeta{IP: "127.0.0.1"}}
	got, err := DecodeRegistration(Encode(&good))
	require.NoError(t, err)
	assert.Equal(t, good, got)

	cases := map[string]struct {
		raw  string
		want error
	}{
		"not json":      {"\x00{", ErrMalformed},
		"no version":    {`{"kind":"register"}`, ErrMalformed},
		"future":        {`{"v":2,"kind":"register"}`, ErrMalformed},
		"unknown field": {`{"v":1,"kind":"register","tokenId":"T","itemId":"i","userId":"u","requestedAt":1,"x":1}`, ErrMalformed},
		"trailing":      {`{"v":1,"kind":"register","tokenId":"T","itemId":"i","userId":"u","requestedAt":1} {}`, ErrMalformed},
		"wrong type":    {`{"v":1,"kind":"register","tokenId":"T","itemId":"i","userId":7,"requestedAt":1}`, ErrMalformed},
		"bad kind":      {`{"v":1,"kind":"jump","tokenId":"T","itemId":"i","userId":"u","requestedAt":1}`, ErrInvalid},
		"bad user":      {`{"v":1,"kind":"register","tokenId":"T","itemId":"i","userId":"a b","requestedAt":1}`, ErrInvalid},
		"no token":      {`{"v":1,"kind":"register","itemId":"i","userId":"u","requestedAt":1}`, ErrInvalid},
		"no time":       {`{"v":1,"kind":"leave","tokenId":"T","itemId":"i","userId":"u"}`, ErrInvalid},
	}
	for name, c := range cases {
		_, err := DecodeRegistration([]byte(c.raw))
		assert.True(t, errors.Is(err, c.want), "%s: got %v", name, err)
	}
}

func TestDecodeItem(t *testing.T) {
	s := ItemState{V: 1, ItemID: "i", Name: "n", Stock: Unlimited, Enabled: true,
		Policy: AdmissionPolicy{RatePerSecond: 1.5, MaxActive: 3, SessionTTLSeconds: 60}, Version: 9, UpdatedAt: 1}
	got, err := DecodeItem(Encode(&s))
	require.NoError(t, err)
	assert.Equal(t, s, got)
	assert.NotContains(t, string(Encode(&s)), "mode", "a fifo item reads as before modes existed")
	assert.Equal(t, ModeFIFO, s.ModeOf())
	for _, m := range []string{ModeFIFO, ModePassthrough, ModeReject} {
		withMode := s
		withMode.Mode, withMode.RejectMessage = m, "msg"
		got, err := DecodeItem(Encode(&withMode))
		require.NoError(t, err, m)
		assert.Equal(t, withMode, got)
	}
	for name, mut := range map[string]func(*ItemState){
		"stock":   func(s *ItemState) { s.Stock = -2 },
		"version": func(s *ItemState) { s.Version = 0 },
		"rate":    func(s *ItemState) { s.Policy.RatePerSecond = -1 },
		"max":     func(s *ItemState) { s.Policy.MaxActive = -1 },
		"ttl":     func(s *ItemState) { s.Policy.SessionTTLSeconds = 86401 },
		"id":      func(s *ItemState) { s.ItemID = "a b" },
		"mode":    func(s *ItemState) { s.Mode = "lottery" },
		"message": func(s *ItemState) { s.RejectMessage = string(make([]byte, MaxRejectMessage+1)) },
	} {
		bad := s
		mut(&bad)
		_, err := DecodeItem(Encode(&bad))
		assert.True(t, errors.Is(err, ErrInvalid), "%s: %v", name, err)
	}
}

func FuzzDecodeRegistration(f *testing.F) {
	f.Add([]byte(`{"v":1,"kind":"register","tokenId":"T","itemId":"i","userId":"u","requestedAt":1}`))
	f.Add([]byte(`{"v":2}`))
	f.Add([]byte("\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeRegistration(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if e.Validate() != nil || e.V != Version {
			t.Fatalf("accepted an invalid event %+v", e)
		}
	})
}

// What the api writes takes the fast path and decodes as the library does.
func TestDecodeRegistrationFastTakesTheApisRecords(t *testing.T) {
	for _, e := range []RegistrationEvent{
		{V: Version, Kind: KindRegister, TokenID: "T0KEN", ItemID: "drop", UserID: "anon-x", RequestedAt: 1800000000000,
			Client: &ClientMeta{IP: "203.0.113.0/24", UserAgent: "Mozilla/5.0 (X11; Linux x86_64)"}, Window: 1800000060000, Holder: HolderToken},
		{V: Version, Kind: KindLeave, TokenID: "T", ItemID: "i", UserID: "u", RequestedAt: 1, Client: &ClientMeta{}, Holder: HolderUser},
		{V: Version, Kind: KindRegister, TokenID: "T", ItemID: "i", UserID: "u", RequestedAt: 1},
	} {
		b := Encode(&e)
		var fast RegistrationEvent
		require.True(t, decodeRegistrationFast(b, &fast), "%s", b)
		var lib RegistrationEvent
		require.NoError(t, decodeStrict(b, &lib, &lib.V))
		assert.Equal(t, lib, fast)
		got, err := DecodeRegistration(b)
		require.NoError(t, err)
		assert.Equal(t, e, got)
	}
	for _, b := range []string{
		`{"v":1,"kind":"register","tokenId":"T","itemId":"i","userId":"u","requestedAt":1,"bypass":{"code":"c","count":1,"expiresAt":1}}`,
		`{"v":1,"kind":"register","tokenId":"T","itemId":"i","userId":"u","requestedAt":1.5}`,
		`{"v":1,"Kind":"register"}`, `{"v":1,"v":1}`, `{"v":1,"client":null}`, `{"v":1,"userId":"a\u0041"}`, `{"v":1} {}`,
	} {
		var e RegistrationEvent
		assert.False(t, decodeRegistrationFast([]byte(b), &e), "%s goes to the library", b)
	}
}

// FuzzDecodeRegistrationFastAgrees holds the fast path to the library: what
// it accepts, the library accepts as the same event.
func FuzzDecodeRegistrationFastAgrees(f *testing.F) {
	f.Add([]byte(`{"v":1,"kind":"register","tokenId":"T","itemId":"i","userId":"u","requestedAt":1,"client":{"ip":"1.2.3.0/24","userAgent":"ua"},"window":5,"holder":"token"}`))
	f.Add([]byte(`{"v":1,"kind":"leave","tokenId":"T","itemId":"i","userId":"u","requestedAt":-0}`))
	f.Add([]byte(`{"v":01}`))
	f.Add([]byte(` { "v" : 1 , "client" : { } } `))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast RegistrationEvent
		if !decodeRegistrationFast(b, &fast) {
			return
		}
		var lib RegistrationEvent
		if err := decodeStrict(b, &lib, &lib.V); err != nil && fast.V == Version {
			t.Fatalf("fast path accepted %q, the library refused it: %v", b, err)
		}
		if fast.V == Version && !assert.ObjectsAreEqual(lib, fast) {
			t.Fatalf("%q: fast %+v, library %+v", b, fast, lib)
		}
	})
}

// BenchmarkDecodeRegistration decodes the record the api writes for a
// registration: "fast" is DecodeRegistration (what the consumer calls),
// "library" the strict encoding/json path it falls back to, in the same run.
func BenchmarkDecodeRegistration(b *testing.B) {
	rec := Encode(&RegistrationEvent{V: Version, Kind: KindRegister, TokenID: "JBSWY3DPEHPK3PXPJBSWY3DPEH", ItemID: "concert-2026",
		UserID: "anon-jbswy3dpehpk3pxpjbswy3dpeh", RequestedAt: 1800000000000,
		Client: &ClientMeta{IP: "203.0.113.0/24", UserAgent: "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"},
		Holder: HolderToken})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeRegistration(rec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e RegistrationEvent
			if err := decodeStrict(rec, &e, &e.V); err != nil {
				b.Fatal(err)
			}
			if err := e.Validate(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
