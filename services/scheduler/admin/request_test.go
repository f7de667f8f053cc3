package admin

import (
	"strings"
	"testing"

	"github.com/waitroom/waitroom/pkg/domain/itempatch"
	"github.com/waitroom/waitroom/topics"
)

func TestAdmissionRequestApply(t *testing.T) {
	base := topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 100, SessionTTLSeconds: 300}
	cases := []struct {
		name  string
		body  string
		want  topics.AdmissionPolicy
		code  string
		field string // named in the error message
	}{
		{name: "rate only", body: `{"ratePerSecond":2.5}`, want: topics.AdmissionPolicy{RatePerSecond: 2.5, MaxActive: 100, SessionTTLSeconds: 300}},
		{name: "all", body: `{"ratePerSecond":100000,"maxActive":10000000,"sessionTTLSeconds":86400}`, want: topics.AdmissionPolicy{RatePerSecond: 100000, MaxActive: 10000000, SessionTTLSeconds: 86400}},
		{name: "no cap", body: `{"maxActive":0}`, want: topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 0, SessionTTLSeconds: 300}},
		{name: "pause keeps the rate", body: `{"paused":true}`, want: topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 100, SessionTTLSeconds: 300, Paused: true}},
		{name: "pause with rate 0", body: `{"paused":true,"ratePerSecond":0}`, want: topics.AdmissionPolicy{MaxActive: 100, SessionTTLSeconds: 300, Paused: true}},
		{name: "pause with the resume rate", body: `{"paused":true,"ratePerSecond":5}`, want: topics.AdmissionPolicy{RatePerSecond: 5, MaxActive: 100, SessionTTLSeconds: 300, Paused: true}},
		{name: "resume alone", body: `{"paused":false}`, want: topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 100, SessionTTLSeconds: 300}},
		{name: "resume", body: `{"paused":false,"ratePerSecond":7}`, want: topics.AdmissionPolicy{RatePerSecond: 7, MaxActive: 100, SessionTTLSeconds: 300}},
		{name: "empty object", body: `{}`, code: "INVALID_POLICY"},
		{name: "null", body: `null`, code: "INVALID_POLICY"},
		{name: "negative rate", body: `{"ratePerSecond":-1}`, code: "INVALID_POLICY", field: "ratePerSecond"},
		{name: "huge rate", body: `{"ratePerSecond":100000.5}`, code: "INVALID_POLICY", field: "ratePerSecond"},
		{name: "negative maxActive", body: `{"maxActive":-1}`, code: "INVALID_POLICY", field: "maxActive"},
		{name: "absurd maxActive", body: `{"maxActive":10000001}`, code: "INVALID_POLICY", field: "maxActive"},
		{name: "ttl 0", body: `{"sessionTTLSeconds":0}`, code: "INVALID_POLICY", field: "sessionTTLSeconds"},
		{name: "ttl over a day", body: `{"sessionTTLSeconds":86401}`, code: "INVALID_POLICY", field: "sessionTTLSeconds"},
		{name: "resume at rate 0", body: `{"paused":false,"ratePerSecond":0}`, code: "INVALID_POLICY", field: "ratePerSecond"},
		{name: "unknown field", body: `{"rate":5}`, code: "INVALID_JSON", field: "rate"},
		{name: "wrong type", body: `{"ratePerSecond":"fast"}`, code: "INVALID_JSON", field: "ratePerSecond"},
		{name: "fractional maxActive", body: `{"maxActive":1.5}`, code: "INVALID_JSON", field: "maxActive"},
		{name: "two objects", body: `{"maxActive":1}{}`, code: "INVALID_JSON"},
		{name: "array", body: `[]`, code: "INVALID_JSON"},
		{name: "empty", body: ``, code: "INVALID_JSON"},
		{name: "truncated", body: `{"maxActive":`, code: "INVALID_JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var req AdmissionRequest
			rerr := decodeStrict([]byte(tc.body), &req)
			got := base
			if rerr == nil {
				got, rerr = req.Apply(base)
			}
			if tc.code == "" {
				if rerr != nil {
					t.Fatalf("error %v, want policy %+v", rerr, tc.want)
				}
				if got != tc.want {
					t.Fatalf("policy %+v, want %+v", got, tc.want)
				}
				return
			}
			if rerr == nil || rerr.Code != tc.code {
				t.Fatalf("error %v, want code %s", rerr, tc.code)
			}
			if !strings.Contains(rerr.Message, tc.field) {
				t.Fatalf("message %q does not name %q", rerr.Message, tc.field)
			}
		})
	}
}

// FuzzAdmissionRequest: no body makes the decoder panic, and a policy that
// passes is always within the operator bounds.
func FuzzAdmissionRequest(f *testing.F) {
	for _, s := range []string{`{"ratePerSecond":5}`, `{"paused":true}`, `{"paused":false,"ratePerSecond":1e5}`,
		`{"maxActive":10000000,"sessionTTLSeconds":1}`, `{"ratePerSecond":-0}`, `null`, `{"x":1}`} {
		f.Add([]byte(s))
	}
	base := topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 100, SessionTTLSeconds: 300}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req AdmissionRequest
		if decodeStrict(body, &req) != nil {
			return
		}
		p, rerr := req.Apply(base)
		if rerr != nil {
			return
		}
		if p.RatePerSecond < 0 || p.RatePerSecond > itempatch.MaxRate || p.MaxActive < 0 || p.MaxActive > itempatch.MaxActiveCap ||
			p.SessionTTLSeconds < 1 || p.SessionTTLSeconds > itempatch.MaxTTLSeconds {
			t.Fatalf("accepted %s as %+v", body, p)
		}
		if req.Paused != nil && (p.Paused != *req.Paused || (!p.Paused && p.RatePerSecond == 0)) {
			t.Fatalf("paused %v asked, got %+v", *req.Paused, p)
		}
		if req.RatePerSecond == nil && p.RatePerSecond != base.RatePerSecond {
			t.Fatalf("the rate changed without being asked: %+v", p)
		}
	})
}
