package httpapi

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
)

func TestDecodeRegisterRequest(t *testing.T) {
	cases := []struct {
		body, user, code string
	}{
		{"", "", ""},
		{"  \n", "", ""},
		{`{}`, "", ""},
		{`{"userId":"alice"}`, "alice", ""},
		{`{"userId":"a.b_c:d-9"}`, "a.b_c:d-9", ""},
		{`{"userId":null}`, "", ""},
		{`{"userId":"al ice"}`, "", "INVALID_USER_ID"},
		{`{"userId":"` + strings.Repeat("x", 65) + `"}`, "", "INVALID_USER_ID"},
		{`{"userId":"` + strings.Repeat("x", 64) + `"}`, strings.Repeat("x", 64), ""},
		{`{"userId":"ü"}`, "", "INVALID_USER_ID"},
		{`{"userId":1}`, "", "INVALID_JSON"},
		{`{"userId":["a"]}`, "", "INVALID_JSON"},
		{`{"other":1}`, "", "INVALID_JSON"},
		{`[]`, "", "INVALID_JSON"},
		{`"alice"`, "", "INVALID_JSON"},
		{`{"userId":"a"} x`, "", "INVALID_JSON"},
		{`{"userId":"a"`, "", "INVALID_JSON"},
		{`{`, "", "INVALID_JSON"},
	}
	for _, c := range cases {
		req, err := DecodeRegisterRequest([]byte(c.body))
		if c.code == "" {
			if assert.Nil(t, err, "body %q", c.body) {
				assert.Equal(t, c.user, req.UserID, "body %q", c.body)
			}
			continue
		}
		if assert.NotNil(t, err, "body %q", c.body) {
			assert.Equal(t, c.code, err.Code, "body %q", c.body)
			assert.NotEmpty(t, err.Message)
		}
	}
}

func FuzzDecodeRegisterRequest(f *testing.F) {
	for _, s := range []string{"", "{}", `{"userId":"alice"}`, `{"userId":1}`, `{"userId":"a b"}`, `[`, `{"userId":"a"}{}`, "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeRegisterRequest(body)
		if err != nil {
			if err.Code != "INVALID_JSON" && err.Code != "INVALID_USER_ID" {
				t.Fatalf("unknown error code %q", err.Code)
			}
			if !utf8.ValidString(err.Message) && utf8.Valid(body) {
				t.Fatalf("message not UTF-8: %q", err.Message)
			}
			return
		}
		// Whatever is accepted is a usable id (or empty: the server makes one).
		if req.UserID != "" && !topics.ValidID(req.UserID) {
			t.Fatalf("accepted invalid userId %q", req.UserID)
		}
	})
}

// The common bodies take the fast path, and say what the library says.
func TestDecodeFlatTakesTheCommonBodies(t *testing.T) {
	for _, body := range []string{
		`{}`, ` { } `, `{"userId":"alice"}`, "{ \"userId\" :\t\"alice\" ,\n\"requestId\":\"0123456789abcdef\" }\r\n",
		`{"userId":"u","bypass":"CODE-1","assertion":"a.b.c","requestId":"r-0123456789abcdef"}`, `{"userId":""}`,
	} {
		var fast, lib RegisterRequest
		if assert.True(t, decodeFlat([]byte(body), &fast), "body %q", body) {
			assert.Nil(t, httpserver.DecodeJSON([]byte(body), &lib))
			assert.Equal(t, lib, fast, "body %q", body)
		}
	}
	for _, body := range []string{
		`{"userid":"alice"}`, `{"userId":"a\"b"}`, `{"userId":"ü"}`, `{"userId":null}`, `{"userId":"a","userId":"b"}`,
		`{"pow":{"challenge":"c","solution":"s"}}`, `{"userId":"a",}`, `{"userId":"a"} {}`, `{"other":"x"}`, `{"userId":1}`,
	} {
		var r RegisterRequest
		assert.False(t, decodeFlat([]byte(body), &r), "body %q goes to the library", body)
	}
}

// FuzzDecodeFlatAgrees holds the fast path to httpserver.DecodeJSON: what
// it accepts, the library accepts with the same fields.
func FuzzDecodeFlatAgrees(f *testing.F) {
	for _, s := range []string{`{}`, `{"userId":"alice"}`, `{"userId":"a","requestId":"0123456789abcdef"}`,
		`{"bypass":"x","assertion":"y"}`, `{"userId":"a","userId":"b"}`, `{"UserId":"a"}`, ` {"userId" : "a" } `, `{"userId":"a"}x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast RegisterRequest
		if !decodeFlat(body, &fast) {
			return
		}
		var lib RegisterRequest
		if e := httpserver.DecodeJSON(body, &lib); e != nil {
			t.Fatalf("fast path accepted %q, the library refused it: %s", body, e.Message)
		}
		if fast != lib {
			t.Fatalf("body %q: fast %+v, library %+v", body, fast, lib)
		}
	})
}
