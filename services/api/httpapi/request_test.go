package httpapi

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
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
