package httpapi_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/api/httpapi"
)

// flood sends n calls and counts the answers by status code; each 429 must
// be RATE_LIMITED with Retry-After, and the last one's message is returned.
// It also returns how long the calls took, which bounds how many tokens the
// bucket got back meanwhile.
func flood(t *testing.T, n int, call func() answer) (codes map[int]int, took time.Duration, refusal string) {
	t.Helper()
	codes = map[int]int{}
	start := time.Now()
	for range n {
		a := call()
		codes[a.Code]++
		if a.Code == http.StatusTooManyRequests {
			var body httpserver.ErrorBody
			a.decode(t, &body)
			require.Equal(t, "RATE_LIMITED", body.Error.Code)
			require.NotEmpty(t, a.Header.Get("Retry-After"))
			refusal = body.Error.Message
		}
	}
	return codes, time.Since(start), refusal
}

// passedWithin asserts a bucket of burst refilled at 1/s let through at
// most what it held plus what came back while the calls ran, and refused
// the rest.
func passedWithin(t *testing.T, codes map[int]int, ok, n, burst int, took time.Duration, what string) {
	t.Helper()
	assert.GreaterOrEqual(t, codes[ok], burst, "%s: the burst passes", what)
	assert.LessOrEqual(t, codes[ok], burst+int(took/time.Second)+1, "%s: at most the burst and the refill in %s", what, took)
	assert.Equal(t, n, codes[ok]+codes[http.StatusTooManyRequests], "%s: every other call is 429 (%v)", what, codes)
}

// One token that reads its status, leaves, or verifies its admission over
// and over is refused 429 RATE_LIMITED past its own bucket (so one token
// cannot write unlimited leave records), while another token is unaffected.
func TestThrottlePerToken(t *testing.T) {
	s := newAPIWith(t, func(c *httpapi.Config) {
		c.Throttle.StatusRate, c.Throttle.StatusBurst = 1, 3
		c.Throttle.LeaveRate, c.Throttle.LeaveBurst = 1, 2
		c.Throttle.AdmissionRate, c.Throttle.AdmissionBurst = 1, 2
	}, item("drop"), item("gig"))
	alice, qa := s.register("drop", "alice")
	bob, qb := s.register("drop", "bob")
	s.apply(qa)
	s.apply(qb)

	path := func(tok string) string { return "/api/v1/items/drop/registrations/" + tok }
	codes, took, refusal := flood(t, 20, func() answer { return s.do(http.MethodGet, path(alice.Token), nil) })
	passedWithin(t, codes, http.StatusOK, 20, 3, took, "alice's status")
	assert.Contains(t, refusal, "this token (status reads)")
	assert.Equal(t, "WAITING", s.status("drop", bob.Token).Status, "bob's status reads are his own")
	// A token that does not verify is the handler's to refuse, not a bucket's.
	assert.Equal(t, http.StatusUnauthorized, s.do(http.MethodGet, path("forged"), nil).Code)

	codes, took, refusal = flood(t, 10, func() answer { return s.do(http.MethodDelete, path(alice.Token), nil) })
	passedWithin(t, codes, http.StatusAccepted, 10, 2, took, "alice's leaves")
	assert.Contains(t, refusal, "this token (leaves)")
	assert.Equal(t, http.StatusAccepted, s.do(http.MethodDelete, path(bob.Token), nil).Code, "bob leaves")

	// verify and complete share the admission token's bucket.
	carol, qc := s.register("gig", "carol")
	dave, qd := s.register("gig", "dave")
	s.apply(qc)
	s.apply(qd)
	s.admit("gig")
	s.admit("gig")
	s.ack("gig")
	admission := func(r httpapi.RegisterResponse) string {
		st := s.status("gig", r.Token)
		require.Equal(t, "ADMITTED", st.Status)
		return st.AdmissionToken
	}
	ca, da := admission(carol), admission(dave)
	codes, took, refusal = flood(t, 10, func() answer {
		return s.post("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: ca, ItemID: "gig"})
	})
	passedWithin(t, codes, http.StatusOK, 10, 2, took, "carol's verifies")
	assert.Contains(t, refusal, "this admission token")
	assert.Equal(t, http.StatusOK, s.post("/api/v1/admissions/verify", httpapi.AdmissionRequest{Token: da, ItemID: "gig"}).Code, "dave's verify")
	assert.Equal(t, http.StatusOK, s.post("/api/v1/admissions/complete", httpapi.AdmissionRequest{Token: da, ItemID: "gig"}).Code, "dave's complete")
}

// Status, leave and challenge also pass the client address's buckets when
// they are on (WR_THROTTLE_CALL_IP_RATE): per IPv4 address or IPv6 /64,
// whatever token the call carries.
func TestThrottleCallsPerAddress(t *testing.T) {
	s := newAPIWith(t, func(c *httpapi.Config) {
		behindFrontDoor(c)
		c.Throttle.CallIPRate, c.Throttle.CallIPBurst = 1, 4
	}, item("drop"))
	from := func(ip, path string) answer { return s.do(http.MethodGet, path, nil, "X-Forwarded-For", ip) }
	i := 0
	codes, took, refusal := flood(t, 20, func() answer {
		i++ // a new address of the /64 each time
		return from("2001:db8:5:1::"+strconv.Itoa(i), "/api/v1/items/drop/challenge")
	})
	passedWithin(t, codes, http.StatusOK, 20, 4, took, "challenges from one /64")
	assert.Equal(t, float64(codes[http.StatusTooManyRequests]), s.throttledBy("call-ip"))
	assert.Contains(t, refusal, "this address")
	assert.Equal(t, http.StatusOK, from("2001:db8:5:2::1", "/api/v1/items/drop/challenge").Code, "another /64")

	// Many tokens from one address: the address's bucket, not theirs.
	var toks []string
	for n := range 20 {
		r, q := s.register("drop", "u"+strconv.Itoa(n))
		s.apply(q)
		toks = append(toks, r.Token)
	}
	n := 0
	codes, took, _ = flood(t, 20, func() answer {
		n++
		return from("198.51.100.7", "/api/v1/items/drop/registrations/"+toks[n-1])
	})
	passedWithin(t, codes, http.StatusOK, 20, 4, took, "status reads of 20 tokens from one address")
}
