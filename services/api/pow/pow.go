// Package pow is the proof-of-work an item may ask of a registration: the
// api hands out signed, self-contained challenges and verifies solutions in
// microseconds (one HMAC and one sha256), so a client pays about a second of
// hashing per registration while the api pays almost nothing.
//
// # Wire format (byte-exact)
//
// A challenge is the ASCII string
//
//	"wrpow1." + b64(item) + "." + difficulty + "." + expiresAtMs + "." + nonce + "." + b64(mac)
//
// where b64 is unpadded base64url, difficulty and expiresAtMs are decimal,
// nonce is 16 random bytes in unpadded base64url, and mac is
// HMAC-SHA256(key, every byte before the last ".") — so a challenge cannot be
// forged, moved to another item, made easier or extended without the key.
//
// A solution x (any string of at most MaxSolution printable ASCII bytes,
// usually a decimal counter) is valid when sha256(challenge + ":" + x) has at
// least difficulty leading zero bits (bits counted from the first byte's
// most significant bit).
//
// Verify checks the signature, the item, the expiry and the zeros; replay
// (one challenge used twice) is the caller's to refuse: the api keeps each
// used challenge in Redis until it expires (see Spent).
package pow

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Prefix starts every challenge (the format's version).
const Prefix = "wrpow1."

// MaxSolution bounds a solution's length (bytes).
const MaxSolution = 64

// MaxChallenge bounds a challenge's length (bytes): a bigger one is refused
// before any hashing.
const MaxChallenge = 512

// Reasons a solution is refused (Error.Reason).
const (
	ReasonMalformed = "malformed"  // not a challenge of this format
	ReasonSignature = "signature"  // not signed by this key
	ReasonItem      = "item"       // issued for another item
	ReasonExpired   = "expired"    // past its expiry
	ReasonWork      = "work"       // not enough leading zero bits
	ReasonEasier    = "difficulty" // issued at a lower difficulty than the item now asks
)

// Error is a refused solution; Reason is one of the Reason constants.
type Error struct {
	Reason  string
	Message string
}

func (e *Error) Error() string { return "proof-of-work " + e.Reason + ": " + e.Message }

func refuse(reason, format string, a ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, a...)}
}

// Challenge is a decoded challenge.
type Challenge struct {
	Item       string
	Difficulty int
	ExpiresAt  time.Time
	Raw        string // the string as issued
}

// Issuer issues and verifies challenges with one HMAC key.
type Issuer struct {
	key []byte
	ttl time.Duration
	now func() time.Time
}

// Option tunes an Issuer.
type Option func(*Issuer)

// WithClock sets the clock (tests).
func WithClock(now func() time.Time) Option { return func(i *Issuer) { i.now = now } }

// New returns an Issuer signing with key (at least 32 bytes) whose
// challenges live ttl.
func New(key []byte, ttl time.Duration, opts ...Option) (*Issuer, error) {
	if len(key) < 32 {
		return nil, errors.New("proof-of-work key must be at least 32 bytes")
	}
	if ttl <= 0 {
		return nil, errors.New("proof-of-work challenge lifetime must be positive")
	}
	i := &Issuer{key: append([]byte(nil), key...), ttl: ttl, now: time.Now}
	for _, o := range opts {
		o(i)
	}
	return i, nil
}

// DeriveKey derives the proof-of-work HMAC key from another secret (the
// api's queue-token key), so the api needs no extra key to start.
func DeriveKey(secret string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("waitroom proof-of-work key v1"))
	return m.Sum(nil)
}

var b64 = base64.RawURLEncoding.Strict() // one encoding per value: no two strings name one challenge

// Issue returns a fresh challenge for item at difficulty.
func (i *Issuer) Issue(item string, difficulty int) Challenge {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails
	exp := i.now().Add(i.ttl)
	body := Prefix + b64.EncodeToString([]byte(item)) + "." + strconv.Itoa(difficulty) + "." +
		strconv.FormatInt(exp.UnixMilli(), 10) + "." + b64.EncodeToString(nonce[:])
	return Challenge{Item: item, Difficulty: difficulty, ExpiresAt: time.UnixMilli(exp.UnixMilli()), Raw: body + "." + b64.EncodeToString(i.mac(body))}
}

func (i *Issuer) mac(body string) []byte {
	m := hmac.New(sha256.New, i.key)
	m.Write([]byte(body))
	return m.Sum(nil)
}

// Verify checks that solution solves challenge for item at no less than
// minDifficulty (the item's current difficulty) and returns the decoded
// challenge; an *Error names the reason otherwise.
func (i *Issuer) Verify(item string, minDifficulty int, challenge, solution string) (Challenge, error) {
	if len(challenge) > MaxChallenge || !strings.HasPrefix(challenge, Prefix) {
		return Challenge{}, refuse(ReasonMalformed, "not a challenge from GET /api/v1/items/%s/challenge", item)
	}
	if len(solution) == 0 || len(solution) > MaxSolution || !printable(solution) {
		return Challenge{}, refuse(ReasonMalformed, "solution must be 1-%d printable ASCII characters", MaxSolution)
	}
	dot := strings.LastIndexByte(challenge, '.')
	body, sig := challenge[:dot], challenge[dot+1:]
	mac, err := b64.DecodeString(sig)
	if err != nil || !hmac.Equal(mac, i.mac(body)) {
		return Challenge{}, refuse(ReasonSignature, "the challenge was not issued by this room")
	}
	parts := strings.Split(body[len(Prefix):], ".")
	if len(parts) != 4 {
		return Challenge{}, refuse(ReasonMalformed, "a challenge has 4 fields")
	}
	it, err1 := b64.DecodeString(parts[0])
	d, err2 := strconv.Atoi(parts[1])
	ms, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return Challenge{}, refuse(ReasonMalformed, "unreadable fields")
	}
	c := Challenge{Item: string(it), Difficulty: d, ExpiresAt: time.UnixMilli(ms), Raw: challenge}
	switch {
	case c.Item != item:
		return c, refuse(ReasonItem, "the challenge is for another item")
	case !i.now().Before(c.ExpiresAt):
		return c, refuse(ReasonExpired, "the challenge expired; get a new one")
	case d < minDifficulty:
		return c, refuse(ReasonEasier, "the item now asks %d bits, the challenge %d; get a new one", minDifficulty, d)
	case LeadingZeros(Hash(challenge, solution)) < d:
		return c, refuse(ReasonWork, "the solution does not give %d leading zero bits", d)
	}
	return c, nil
}

// Hash is sha256(challenge + ":" + solution).
func Hash(challenge, solution string) [32]byte {
	h := sha256.New()
	h.Write([]byte(challenge))
	h.Write([]byte{':'})
	h.Write([]byte(solution))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// LeadingZeros counts the leading zero bits of h.
func LeadingZeros(h [32]byte) int {
	n := 0
	for _, b := range h {
		if b != 0 {
			return n + bits.LeadingZeros8(b)
		}
		n += 8
	}
	return n
}

// Solve finds a solution by counting up from 0 (tests, benchmarks and the
// CLI; the page does the same in the browser). It gives up after max tries.
func Solve(challenge string, difficulty int, max uint64) (string, bool) {
	for n := uint64(0); n < max; n++ {
		x := strconv.FormatUint(n, 10)
		if LeadingZeros(Hash(challenge, x)) >= difficulty {
			return x, true
		}
	}
	return "", false
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
