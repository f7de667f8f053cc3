package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/security/assertion"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"go.uber.org/zap"
)

func (s *api) registerFrom(ip, item, user string) answer {
	s.t.Helper()
	b, _ := json.Marshal(map[string]string{"userId": user})
	return s.do(http.MethodPost, "/api/v1/items/"+item+"/registrations", b, "X-Forwarded-For", ip, "Content-Type", "application/json")
}

// A flood from one address is refused at the door (429 RATE_LIMITED with
// Retry-After) while another address registers as before; a proven user's
// own bucket holds whatever address the user comes from, and a typed userId
// has none (anyone typing it could empty it).
func TestThrottleByAddressAndByUser(t *testing.T) {
	const secret = "the-site-s-assertion-secret-32-bytes!"
	s := newAPIWith(t, func(c *httpapi.Config) {
		behindFrontDoor(c)
		c.Throttle = httpapi.ThrottleConfig{IPRate: 5, UserRate: 2, Period: time.Minute}
		c.Assertion = assertion.Config{Issuer: "shop", Secret: secret, MaxTTL: time.Minute}
	}, item("drop"))

	for i := range 5 {
		a := s.registerFrom("203.0.113.7", "drop", "flood-"+strconv.Itoa(i))
		require.Equal(t, http.StatusAccepted, a.Code, "registration %d within the bucket: %s", i, a.Body)
	}
	a := s.registerFrom("203.0.113.7", "drop", "flood-5")
	require.Equal(t, http.StatusTooManyRequests, a.Code, "%s", a.Body)
	var body httpserver.ErrorBody
	a.decode(t, &body)
	assert.Equal(t, "RATE_LIMITED", body.Error.Code)
	assert.Contains(t, body.Error.Message, "this address")
	retry, err := strconv.Atoi(a.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", a.Header.Get("Retry-After"))
	assert.True(t, retry >= 1 && retry <= 12, "Retry-After %d s: one token of 5 a minute is 12 s", retry)

	// Another address is not held back by the flood.
	assert.Equal(t, http.StatusAccepted, s.registerFrom("198.51.100.1", "drop", "calm").Code)

	// One proven user from many addresses: the user's bucket (2 a minute).
	proven := func(ip string) answer {
		raw, err := jwt.NewWithClaims(jwt.SigningMethodHS256, siteClaims("roamer", "drop")).SignedString([]byte(secret))
		require.NoError(t, err)
		b, _ := json.Marshal(map[string]string{"assertion": raw})
		return s.do(http.MethodPost, "/api/v1/items/drop/registrations", b, "X-Forwarded-For", ip, "Content-Type", "application/json")
	}
	for i, ip := range []string{"192.0.2.1", "192.0.2.2"} {
		a := proven(ip)
		require.Equal(t, http.StatusAccepted, a.Code, "roamer %d: %s", i, a.Body)
	}
	a = proven("192.0.2.3")
	require.Equal(t, http.StatusTooManyRequests, a.Code, "%s", a.Body)
	a.decode(t, &body)
	assert.Contains(t, body.Error.Message, "this user")
	// The same name typed is a label: no user bucket to empty.
	assert.Equal(t, http.StatusAccepted, s.registerFrom("192.0.2.4", "drop", "roamer").Code)
}

// X-Forwarded-For counts only from a trusted proxy (none by default): a
// client that sends its own cannot spread a flood over made-up addresses.
func TestThrottleIgnoresForwardedForFromUntrustedPeers(t *testing.T) {
	for name, trusted := range map[string][]string{
		"no proxy trusted (the default)": nil,
		"another proxy trusted":          {"10.9.9.9/32"}, // not the test's loopback address
	} {
		t.Run(name, func(t *testing.T) {
			s := newAPIWith(t, func(c *httpapi.Config) {
				c.Throttle = httpapi.ThrottleConfig{IPRate: 3, Period: time.Hour}
				c.TrustedProxies = trusted
			}, item("drop"))
			codes := map[int]int{}
			for i := range 6 {
				codes[s.registerFrom("203.0.113."+strconv.Itoa(i), "drop", "u"+strconv.Itoa(i)).Code]++
			}
			assert.Equal(t, map[int]int{http.StatusAccepted: 3, http.StatusTooManyRequests: 3}, codes,
				"every registration is the peer's (127.0.0.1): one bucket")
		})
	}
}

// When Redis cannot answer, the throttle lets registrations through and
// counts it: Kafka is the record, the door stays open.
func TestThrottleFailsOpen(t *testing.T) {
	reg := prometheus.NewRegistry()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	defer rdb.Close()
	th := httpapi.NewThrottle(rdb, httpapi.ThrottleConfig{IPRate: 1, Period: time.Minute}, reg, zap.NewNop())
	for range 3 {
		ok, _ := th.Allow(context.Background(), "ip", "203.0.113.9")
		assert.True(t, ok)
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "waitroom_api_throttle_errors_total" {
			found = true
			assert.Equal(t, 3.0, mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	assert.True(t, found, "the failures are counted")
	// Off when every rate is 0: no Redis call at all.
	assert.Nil(t, httpapi.NewThrottle(rdb, httpapi.ThrottleConfig{Period: time.Minute}, reg, zap.NewNop()))
}

// behindFrontDoor trusts the test's loopback address as the front door, whose
// X-Forwarded-For names the client.
func behindFrontDoor(c *httpapi.Config) { c.TrustedProxies = []string{"127.0.0.1/32"} }

// throttledBy reads waitroom_api_throttled_total{by} from the api's /metrics.
func (s *api) throttledBy(by string) float64 {
	s.t.Helper()
	m := regexp.MustCompile(`(?m)^waitroom_api_throttled_total\{by="` + regexp.QuoteMeta(by) + `"\} (\S+)$`).
		FindSubmatch(s.do(http.MethodGet, "/metrics", nil).Body)
	if m == nil {
		return 0
	}
	n, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(s.t, err)
	return n
}

// A flood from 10,000 IPv6 addresses of one /64, as a trusted front door
// forwards it, meets one bucket: the /64's. Another /64 of the same /48 has
// a bucket of its own; the /48's wider bucket holds a flood spread over many
// /64s; an IPv4-mapped address is its IPv4 address.
func TestThrottleKeysIPv6ByPrefix(t *testing.T) {
	s := newAPIWith(t, func(c *httpapi.Config) {
		behindFrontDoor(c)
		c.Throttle = httpapi.ThrottleConfig{IPRate: 5, IP48Rate: 12, Period: time.Hour}
	}, item("drop"))

	codes := map[int]int{}
	for i := range 10_000 {
		ip := fmt.Sprintf("2001:db8:77:1:%x:%x::1", i>>8, i&0xff)
		codes[s.registerFrom(ip, "drop", "v6-"+strconv.Itoa(i)).Code]++
	}
	assert.Equal(t, map[int]int{http.StatusAccepted: 5, http.StatusTooManyRequests: 9_995}, codes, "one /64, one bucket of 5")
	assert.Equal(t, 9_995.0, s.throttledBy("ip"))

	// Another /64 of the /48: a bucket of its own, while the /48 has room
	// (12: 5 taken above).
	assert.Equal(t, http.StatusAccepted, s.registerFrom("2001:db8:77:2::1", "drop", "neighbour").Code)
	// A flood over many /64s of the /48 meets the /48's bucket: 6 more.
	codes = map[int]int{}
	for i := range 50 {
		codes[s.registerFrom(fmt.Sprintf("2001:db8:77:%x::1", 100+i), "drop", "spread-"+strconv.Itoa(i)).Code]++
	}
	assert.Equal(t, map[int]int{http.StatusAccepted: 6, http.StatusTooManyRequests: 44}, codes, "one /48, a bucket of 12")
	assert.Equal(t, 44.0, s.throttledBy("ip48"))
	a := s.registerFrom("2001:db8:77:999::1", "drop", "late")
	require.Equal(t, http.StatusTooManyRequests, a.Code)
	assert.Equal(t, "RATE_LIMITED", a.errCode(t))
	assert.NotEmpty(t, a.Header.Get("Retry-After"))
	assert.Equal(t, http.StatusAccepted, s.registerFrom("2001:db8:78:1::1", "drop", "other-site").Code, "another /48")

	// IPv4: the whole address; the mapped form is the same client.
	for i := range 5 {
		require.Equal(t, http.StatusAccepted, s.registerFrom("198.51.100.4", "drop", "v4-"+strconv.Itoa(i)).Code)
	}
	assert.Equal(t, http.StatusTooManyRequests, s.registerFrom("::ffff:198.51.100.4", "drop", "v4-mapped").Code)
	assert.Equal(t, http.StatusAccepted, s.registerFrom("198.51.100.5", "drop", "v4-next").Code, "the next address")
}

// X-Real-IP names nobody, even from the trusted front door: only
// X-Forwarded-For does.
func TestThrottleIgnoresXRealIP(t *testing.T) {
	s := newAPIWith(t, func(c *httpapi.Config) {
		behindFrontDoor(c)
		c.Throttle = httpapi.ThrottleConfig{IPRate: 3, Period: time.Hour}
	}, item("drop"))
	codes := map[int]int{}
	for i := range 6 {
		a := s.do(http.MethodPost, "/api/v1/items/drop/registrations", []byte(`{"userId":"r`+strconv.Itoa(i)+`"}`),
			"X-Real-IP", "203.0.113."+strconv.Itoa(i))
		codes[a.Code]++
	}
	assert.Equal(t, map[int]int{http.StatusAccepted: 3, http.StatusTooManyRequests: 3}, codes, "all the peer's (127.0.0.1)")
	// The same front door's X-Forwarded-For does name the client.
	assert.Equal(t, http.StatusAccepted, s.registerFrom("203.0.113.9", "drop", "xff").Code)
}
