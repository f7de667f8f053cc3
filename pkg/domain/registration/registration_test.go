package registration_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

func TestSignersRefuseMissingKeysOutsideTheDevStack(t *testing.T) {
	c := registration.TokenConfig{TokenAlg: token.HS256, TokenKID: "k1", AdmissionKID: "a1"}
	err := c.Validate()
	require.ErrorIs(t, err, registration.ErrNoKey)
	assert.Contains(t, err.Error(), "WR_TOKEN_KEY is not set")

	c.TokenKey = "a-real-secret-of-at-least-32-bytes-long!!"
	err = c.Validate()
	require.ErrorIs(t, err, registration.ErrNoKey)
	assert.Contains(t, err.Error(), "WR_ADMISSION_KEY is not set")

	c.AdmissionKey = "dGVzdC1vbmx5LWVkMjU1MTktc2VlZC0zMi1ieXRlcyE=" // any valid seed but the published one
	require.NoError(t, c.Validate())

	dev := registration.TokenConfig{TokenAlg: token.HS256, DevKeys: true}
	s, err := dev.Signers(nopLog())
	require.NoError(t, err)
	raw, err := s.Queue.IssueQueue(token.Queue{TokenID: "t", ItemID: "i", UserID: "u"}, time.Minute)
	require.NoError(t, err)
	devQueue, err := token.New(token.HS256, registration.DevTokenKey, "")
	require.NoError(t, err)
	_, err = devQueue.ParseQueue(raw)
	require.NoError(t, err, "the dev stack signs with the development key")

	dev.TokenAlg = token.EdDSA
	require.ErrorIs(t, dev.Validate(), registration.ErrNoKey, "the dev key is an HMAC key")
}

// The development keys are in the source: a deployed service refuses them
// even when they are given in the environment, naming the variable; the dev
// stack (DevKeys) signs with them.
func TestSignersRefusePublishedKeysOutsideTheDevStack(t *testing.T) {
	const (
		secret = "a-real-secret-of-at-least-32-bytes-long!!"
		seed   = "dGVzdC1vbmx5LWVkMjU1MTktc2VlZC0zMi1ieXRlcyE="
		older  = "YW5vdGhlci10ZXN0LW9ubHktZWQyNTUxOS1zZWVkISE=" // a rollover's previous key
	)
	good := registration.TokenConfig{TokenAlg: token.HS256, TokenKey: secret, TokenKID: "k1", AdmissionKey: seed, AdmissionKID: "a1",
		AdmissionKeysExtra: "a0:" + older}
	require.NoError(t, good.Validate())
	for _, c := range []struct {
		name string
		edit func(*registration.TokenConfig)
		want string
	}{
		{"queue key", func(c *registration.TokenConfig) { c.TokenKey = registration.DevTokenKey },
			"WR_TOKEN_KEY is a development key published in waitroom's source, with which anyone can sign: set a secret of your own: published development key"},
		{"queue key with a newline", func(c *registration.TokenConfig) { c.TokenKey = registration.DevTokenKey + "\n" }, "WR_TOKEN_KEY is a development key"},
		{"admission key", func(c *registration.TokenConfig) { c.AdmissionKey = registration.DevAdmissionKey }, "WR_ADMISSION_KEY is a development key"},
		{"admission key of a rollover", func(c *registration.TokenConfig) {
			c.AdmissionKeysExtra = "a0:" + older + ",old:" + registration.DevAdmissionKey
		},
			`WR_ADMISSION_KEYS_EXTRA: key "old" is a development key published in waitroom's source`},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := good
			c.edit(&bad)
			err := bad.Validate()
			require.ErrorIs(t, err, config.ErrPublishedKey)
			assert.Contains(t, err.Error(), c.want)
			bad.DevKeys = true
			assert.NoError(t, bad.Validate(), "the dev stack may")
		})
	}
}

func TestAuthorizeQueue(t *testing.T) {
	s, err := registration.TokenConfig{TokenAlg: token.HS256, DevKeys: true}.Signers(nopLog())
	require.NoError(t, err)
	raw, err := s.Queue.IssueQueue(token.Queue{TokenID: "t", ItemID: "drop", UserID: "u"}, time.Minute)
	require.NoError(t, err)
	expired, err := s.Queue.IssueQueue(token.Queue{TokenID: "t", ItemID: "drop", UserID: "u"}, -time.Hour)
	require.NoError(t, err)
	for name, c := range map[string]struct {
		item, raw string
		status    int
		code      string
	}{
		"bad item": {"no spaces", raw, 400, "INVALID_ITEM_ID"},
		"missing":  {"drop", "", 401, "TOKEN_MISSING"},
		"invalid":  {"drop", raw + "x", 401, "TOKEN_INVALID"},
		"expired":  {"drop", expired, 401, "TOKEN_EXPIRED"},
		"mismatch": {"other", raw, 403, "TOKEN_ITEM_MISMATCH"},
		"admission token": {"drop", func() string {
			a, _ := s.Admission.IssueAdmission(token.Admission{TokenID: "t", ItemID: "drop", UserID: "u", ExpiresAt: time.Now().Add(time.Minute)})
			return a
		}(), 401, "TOKEN_INVALID"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := registration.AuthorizeQueue(s.Queue, c.item, c.raw)
			var e *registration.Error
			require.True(t, errors.As(err, &e), "%v", err)
			assert.Equal(t, c.status, e.Status)
			assert.Equal(t, c.code, e.Code)
		})
	}
	q, err := registration.AuthorizeQueue(s.Queue, "drop", raw)
	require.NoError(t, err)
	assert.Equal(t, "u", q.UserID)
}

func TestQueueTokenOf(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/x?token=fromquery", nil)
	assert.Equal(t, "fromquery", httpserver.QueueTokenOf(r, "frompath"))
	r.Header.Set("Authorization", "bEaReR  frombearer ")
	assert.Equal(t, "frombearer", httpserver.QueueTokenOf(r, "frompath"))
	r = httptest.NewRequest(http.MethodGet, "/x", nil)
	assert.Equal(t, "frompath", httpserver.QueueTokenOf(r, "frompath"))
	assert.Equal(t, "", httpserver.QueueTokenOf(r, httpserver.CurrentToken))
	assert.Equal(t, "", httpserver.Bearer("Basic abc"))
}

func TestAnswerOf(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	for name, c := range map[string]struct {
		st   line.Status
		v    registration.Verdict
		want string
	}{
		"waiting":           {line.Status{State: line.Waiting, Position: 3, TokenID: "live"}, registration.Open, registration.StatusWaiting},
		"waiting, closed":   {line.Status{State: line.Waiting}, registration.Closed, registration.StatusClosed},
		"pending, sold out": {line.Status{State: line.Pending}, registration.SoldOut, registration.StatusSoldOut},
		"pending":           {line.Status{State: line.Pending}, registration.Open, registration.StatusPending},
		"admitted":          {line.Status{State: line.Admitted, ExpiresAtMs: 1_000_001}, registration.Closed, registration.StatusAdmitted},
		"admitted, run out": {line.Status{State: line.Admitted, ExpiresAtMs: 1_000_000}, registration.Open, registration.StatusExpired},
		"gone":              {line.Status{State: line.Gone}, registration.Open, registration.StatusExpired},
		"completed":         {line.Status{State: line.Completed}, registration.SoldOut, registration.StatusCompleted},
		"left":              {line.Status{State: line.LeftLine}, registration.Open, registration.StatusLeft},
		"rejected":          {line.Status{State: line.Rejected}, registration.Open, registration.StatusRejected},
		"unknown state":     {line.Status{State: "??"}, registration.Open, registration.StatusRejected},
	} {
		t.Run(name, func(t *testing.T) {
			a := registration.AnswerOf(c.st, c.v, now)
			assert.Equal(t, c.want, a.Status)
			assert.Equal(t, c.want != registration.StatusWaiting && c.want != registration.StatusPending, a.Final())
		})
	}
	a := registration.AnswerOf(line.Status{State: line.Waiting, Position: 3, WaitingTotal: 9, TokenID: "live"}, registration.Open, now)
	assert.Equal(t, registration.Answer{Status: registration.StatusWaiting, TokenID: "live", Position: 3, WaitingTotal: 9}, a)
}

func TestDecide(t *testing.T) {
	open := topics.ItemState{Enabled: true, Stock: 5}
	code := func(err error) string {
		var e *registration.Error
		if errors.As(err, &e) {
			return e.Code
		}
		return ""
	}
	assert.NoError(t, registration.Decide("i", open, true))
	assert.Equal(t, "ITEM_NOT_FOUND", code(registration.Decide("i", open, false)))
	assert.Equal(t, "QUEUE_CLOSED", code(registration.Decide("i", topics.ItemState{Stock: 5}, true)))
	assert.Equal(t, "SOLD_OUT", code(registration.Decide("i", topics.ItemState{Enabled: true}, true)))

	// Reject mode refuses with the operator's message, or a default one;
	// passthrough and fifo take registrations.
	rejecting := topics.ItemState{Enabled: true, Stock: 5, Mode: topics.ModeReject, RejectMessage: "Back at 10:00"}
	err := registration.Decide("i", rejecting, true)
	var e *registration.Error
	if assert.ErrorAs(t, err, &e) {
		assert.Equal(t, "REGISTRATION_REJECTED", e.Code)
		assert.Equal(t, 409, e.Status)
		assert.Equal(t, "Back at 10:00", e.Message)
	}
	rejecting.RejectMessage = ""
	assert.Contains(t, registration.Decide("i", rejecting, true).Error(), "takes no new registrations")
	for _, m := range []string{"", topics.ModeFIFO, topics.ModePassthrough} {
		open.Mode = m
		assert.NoError(t, registration.Decide("i", open, true), m)
	}
	// A closed item stays closed whatever its mode.
	assert.Equal(t, "QUEUE_CLOSED", code(registration.Decide("i", topics.ItemState{Stock: 5, Mode: topics.ModeReject}, true)))
}

func TestETAPassthroughIsTheNextTick(t *testing.T) {
	it := topics.ItemState{Enabled: true, Stock: topics.Unlimited, Mode: topics.ModePassthrough,
		Policy: topics.AdmissionPolicy{RatePerSecond: 0, MaxActive: 1, SessionTTLSeconds: 60}}
	secs, ok := registration.ETA(50_000, registration.Pace{}, it, true, time.Now())
	assert.True(t, ok)
	assert.Equal(t, int64(1), secs)
	it.Policy.Paused = true
	_, ok = registration.ETA(5, registration.Pace{}, it, true, time.Now())
	assert.False(t, ok, "no ETA while paused, whatever the mode")
}

func TestETA(t *testing.T) {
	now := time.UnixMilli(10_000_000)
	item := func(rate float64, maxActive, ttl int64) topics.ItemState {
		return topics.ItemState{Enabled: true, Stock: topics.Unlimited,
			Policy: topics.AdmissionPolicy{RatePerSecond: rate, MaxActive: maxActive, SessionTTLSeconds: ttl}}
	}
	eta := func(pos int64, p registration.Pace, it topics.ItemState) int64 {
		t.Helper()
		secs, ok := registration.ETA(pos, p, it, true, now)
		require.True(t, ok)
		return secs
	}
	// No cap: people ahead over the rate, whatever was measured (the old
	// estimate divided a young minute's count by 60: 6x too long 10 s in).
	early := registration.Pace{AdmittedLastMinute: 50, Since: now.Add(-10 * time.Second)}
	assert.Equal(t, int64(20), eta(100, early, item(5, 0, 300)))
	// Room for everyone ahead: the rate alone.
	assert.Equal(t, int64(10), eta(50, registration.Pace{Active: 0}, item(5, 50, 300)))
	// 10 free places at 5/s, then 90 more at the expiry rate 50/300 s (nobody completes yet).
	assert.Equal(t, int64(2+540), eta(100, registration.Pace{Active: 40}, item(5, 50, 300)))
	// Past the free places, people get in at the measured pace as soon as
	// there is one (here 2/s): 10 at 5/s, then 90 at 2/s.
	measured := registration.Pace{Active: 40, AdmittedLastMinute: 120, Since: now.Add(-60 * time.Second)}
	assert.Equal(t, int64(2+45), eta(100, measured, item(5, 50, 300)))
	// A full room: places free at the measured pace (here 1/s), within [maxActive/ttl, rate].
	full := registration.Pace{Active: 50, AdmittedLastMinute: 60, Since: now.Add(-60 * time.Second)}
	assert.Equal(t, int64(30), eta(30, full, item(5, 50, 300)))
	fast := registration.Pace{Active: 50, AdmittedLastMinute: 600, Since: now.Add(-60 * time.Second)}
	assert.Equal(t, int64(6), eta(30, fast, item(5, 50, 300)), "never faster than the rate")
	slow := registration.Pace{Active: 50, AdmittedLastMinute: 1, Since: now.Add(-60 * time.Second)}
	assert.Equal(t, int64(180), eta(30, slow, item(5, 50, 300)), "never slower than expiries free places")

	for name, it := range map[string]topics.ItemState{
		"paused":   item(0, 50, 300),
		"closed":   {Stock: 5, Policy: topics.AdmissionPolicy{RatePerSecond: 5}},
		"sold out": {Enabled: true, Policy: topics.AdmissionPolicy{RatePerSecond: 5}},
	} {
		_, ok := registration.ETA(3, registration.Pace{}, it, true, now)
		assert.False(t, ok, name)
	}
	_, ok := registration.ETA(3, registration.Pace{}, item(5, 0, 0), false, now)
	assert.False(t, ok, "unknown item")
}

// WR_ADMISSION_KEYS_EXTRA: kid:seed pairs, each checked, refused with the
// variable's name; the keys verify and are published, never sign.
func TestAdmissionKeysExtra(t *testing.T) {
	seed := func(b byte) string {
		k := make([]byte, 32)
		for i := range k {
			k[i] = b
		}
		return base64.StdEncoding.EncodeToString(k)
	}
	c := registration.TokenConfig{TokenAlg: token.HS256, TokenKey: "a-real-secret-of-at-least-32-bytes-long!!",
		AdmissionKey: seed(2), AdmissionKID: "a2", AdmissionKeysExtra: " a1:" + seed(1) + ", a0:" + seed(0) + " "}
	s, err := c.Signers(nopLog())
	require.NoError(t, err)
	set, ok := s.Admission.PublicJWKS()
	require.True(t, ok)
	var kids []string
	for _, k := range set.Keys {
		kids = append(kids, k.Kid)
	}
	assert.Equal(t, []string{"a2", "a1", "a0"}, kids)
	old, err := token.New(token.EdDSA, seed(1), "a1")
	require.NoError(t, err)
	raw, err := old.IssueAdmission(token.Admission{TokenID: "T", ItemID: "i", UserID: "u", ExpiresAt: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	_, err = s.Admission.ParseAdmission(raw)
	require.NoError(t, err, "a token of the previous key still verifies")

	for name, v := range map[string]string{
		"no colon":       "a1" + seed(1),
		"bad kid":        "a 1:" + seed(1),
		"bad seed":       "a1:bm90LWEtc2VlZA==",
		"the signer's":   "a2:" + seed(1),
		"the same key":   "a1:" + seed(2),
		"a kid twice":    "a1:" + seed(1) + ",a1:" + seed(3),
		"an empty kid":   ":" + seed(1),
		"a kid too long": strings.Repeat("k", 65) + ":" + seed(1),
	} {
		c := c
		c.AdmissionKeysExtra = v
		err := c.Validate()
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "WR_ADMISSION_KEYS_EXTRA", name)
	}
}

// Admission tokens may be ES256 (P-256) for sites that cannot verify EdDSA;
// queue tokens never are, and an ES256 room has no Ed25519 rollover keys.
func TestSignersWithES256Admissions(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	require.NoError(t, err)
	c := registration.TokenConfig{TokenAlg: token.HS256, TokenKey: "a-real-secret-of-at-least-32-bytes-long!!", TokenKID: "k1",
		AdmissionAlg: token.ES256, AdmissionKey: base64.StdEncoding.EncodeToString(der), AdmissionKID: "e1"}
	s, err := c.Signers(zap.NewNop())
	require.NoError(t, err)
	assert.Equal(t, token.ES256, s.Admission.Alg())
	set, ok := s.Admission.PublicJWKS()
	require.True(t, ok)
	assert.Equal(t, "EC", set.Keys[0].Kty)

	bad := c
	bad.TokenAlg = token.ES256
	assert.ErrorContains(t, bad.Validate(), "WR_TOKEN_ALG")
	bad = c
	bad.AdmissionKey = ""
	assert.ErrorIs(t, bad.Validate(), registration.ErrNoKey)
	bad = c
	bad.AdmissionKeysExtra = "old:" + registration.DevAdmissionKey
	assert.ErrorContains(t, bad.Validate(), "WR_ADMISSION_KEYS_EXTRA")
	bad = c
	bad.AdmissionAlg = "RS256"
	assert.ErrorContains(t, bad.Validate(), "WR_ADMISSION_ALG")
}

// A steered item's wait runs at the effective rate: the measured pace,
// within [minRate, min(maxRate, ratePerSecond)], whatever maxActive says.
func TestETAOfASteeredItemUsesTheEffectiveRate(t *testing.T) {
	now := time.UnixMilli(10_000_000)
	it := topics.ItemState{Enabled: true, Stock: topics.Unlimited,
		Policy: topics.AdmissionPolicy{RatePerSecond: 50, MaxActive: 1000, SessionTTLSeconds: 300, MinRate: 1, MaxRate: 20,
			Steer: &topics.SteerPolicy{TargetP95Ms: 300}}}
	eta := func(pos int64, p registration.Pace) int64 {
		t.Helper()
		secs, ok := registration.ETA(pos, p, it, true, now)
		require.True(t, ok)
		return secs
	}
	minute := func(n int64) registration.Pace {
		return registration.Pace{AdmittedLastMinute: n, Since: now.Add(-time.Minute)}
	}
	assert.Equal(t, int64(25), eta(100, minute(240)), "the controller admits 4/s: 100 ahead wait 25 s")
	assert.Equal(t, int64(100), eta(100, registration.Pace{}), "nothing measured yet: minRate")
	assert.Equal(t, int64(5), eta(100, minute(6000)), "never faster than maxRate")
	assert.Equal(t, int64(100), eta(100, minute(6)), "never slower than minRate")
	it.Policy.Steer.Mode = topics.SteerAdvise
	assert.Equal(t, int64(2), eta(100, registration.Pace{}), "advise-only: the policy's rate and room")
}
