// Package bypass is the operator's bypass codes: Ed25519-signed, bounded
// (an item, a count of registrations, an expiry) codes for staff and
// partners, admitted at the next tick without waiting. The scheduler's admin
// API signs them with the private key; the api verifies them with the public
// key only; the consumer counts their uses in the line (queue.Line).
//
// # Wire format (byte-exact)
//
//	"wrb1." + b64(id + "|" + item + "|" + count + "|" + expiresAtMs) + "." + b64(sig)
//
// where b64 is unpadded base64url, count and expiresAtMs are decimal, id and
// item are topics.ValidID strings (which never hold "|"), and sig is the
// Ed25519 signature of every byte before the last ".".
package bypass

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/topics"
)

// Prefix starts every code (the format's version).
const Prefix = "wrb1."

// MaxCode bounds a code's length (bytes).
const MaxCode = 512

// MaxCount bounds how many registrations one code admits.
const MaxCount = 100_000

// MaxTTL bounds a code's lifetime.
const MaxTTL = 30 * 24 * time.Hour

// Reasons a code is refused (Error.Reason).
const (
	ReasonMalformed = "malformed"
	ReasonSignature = "signature"
	ReasonItem      = "item"
	ReasonExpired   = "expired"
)

// Error is a refused code.
type Error struct {
	Reason  string
	Message string
}

func (e *Error) Error() string { return "bypass code " + e.Reason + ": " + e.Message }

// Code is what a code grants.
type Code struct {
	ID        string    `json:"id"`
	Item      string    `json:"itemId"`
	Count     int64     `json:"count"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Use is what the register record carries of c.
func (c Code) Use() *topics.BypassUse {
	return &topics.BypassUse{Code: c.ID, Count: c.Count, ExpiresAt: c.ExpiresAt.UnixMilli()}
}

var b64 = base64.RawURLEncoding.Strict()

// ParsePrivate reads a base64 (standard) Ed25519 seed of 32 bytes.
func ParsePrivate(seed string) (ed25519.PrivateKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(seed))
	if err != nil || len(b) != ed25519.SeedSize {
		return nil, fmt.Errorf("a bypass signing key is a base64 Ed25519 seed of %d bytes", ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(b), nil
}

// ParsePublic reads a base64 (standard) Ed25519 public key of 32 bytes.
func ParsePublic(key string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(key))
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("a bypass public key is a base64 Ed25519 public key of %d bytes", ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// PublicOf is the base64 public key of a base64 seed (what the api is given).
func PublicOf(seed string) (string, error) {
	priv, err := ParsePrivate(seed)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)), nil
}

// Issue signs a code for item admitting count registrations until now+ttl.
func Issue(priv ed25519.PrivateKey, item string, count int64, ttl time.Duration, now time.Time) (Code, string, error) {
	switch {
	case !topics.ValidID(item):
		return Code{}, "", fmt.Errorf("itemId %q is not %s", item, topics.IDRule)
	case count < 1 || count > MaxCount:
		return Code{}, "", fmt.Errorf("count %d is not in 1..%d", count, MaxCount)
	case ttl < time.Second || ttl > MaxTTL:
		return Code{}, "", fmt.Errorf("ttl %s is not in 1s..%s", ttl, MaxTTL)
	}
	c := Code{ID: "b" + strings.ToLower(rand.Text()[:15]), Item: item, Count: count, ExpiresAt: time.UnixMilli(now.Add(ttl).UnixMilli())}
	body := Prefix + b64.EncodeToString([]byte(c.ID+"|"+item+"|"+strconv.FormatInt(count, 10)+"|"+strconv.FormatInt(c.ExpiresAt.UnixMilli(), 10)))
	return c, body + "." + b64.EncodeToString(ed25519.Sign(priv, []byte(body))), nil
}

// Verify checks code's signature with pub, that it is for item and not
// expired at now; an *Error names the reason otherwise. Whether its uses are
// spent is the line's to say (queue.Line.BypassUses).
func Verify(pub ed25519.PublicKey, item, code string, now time.Time) (Code, error) {
	if len(code) > MaxCode || !strings.HasPrefix(code, Prefix) {
		return Code{}, &Error{ReasonMalformed, "not a bypass code"}
	}
	dot := strings.LastIndexByte(code, '.')
	body, sig := code[:dot], code[dot+1:]
	s, err := b64.DecodeString(sig)
	if err != nil || len(s) != ed25519.SignatureSize || !ed25519.Verify(pub, []byte(body), s) {
		return Code{}, &Error{ReasonSignature, "the code was not issued by this room's operators"}
	}
	raw, err := b64.DecodeString(body[len(Prefix):])
	if err != nil {
		return Code{}, &Error{ReasonMalformed, "unreadable code"}
	}
	f := strings.Split(string(raw), "|")
	if len(f) != 4 {
		return Code{}, &Error{ReasonMalformed, "a code has 4 fields"}
	}
	n, err1 := strconv.ParseInt(f[2], 10, 64)
	ms, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || !topics.ValidID(f[0]) || n < 1 || ms <= 0 {
		return Code{}, &Error{ReasonMalformed, "unreadable fields"}
	}
	c := Code{ID: f[0], Item: f[1], Count: n, ExpiresAt: time.UnixMilli(ms)}
	switch {
	case c.Item != item:
		return c, &Error{ReasonItem, "the code is for another item"}
	case !now.Before(c.ExpiresAt):
		return c, &Error{ReasonExpired, "the code expired at " + c.ExpiresAt.UTC().Format(time.RFC3339)}
	}
	return c, nil
}

// ErrNoKey says bypass codes are not configured.
var ErrNoKey = errors.New("bypass codes are off: no key configured")

// Allowance is how many registrations the code a register record used may
// place: its count, or 0 when the record was made at or after the code's
// expiry (the api refuses those; a record is judged by its own time, so the
// consumer and a rebuild agree).
func Allowance(ev *topics.RegistrationEvent) int64 {
	if ev.Bypass == nil || ev.RequestedAt >= ev.Bypass.ExpiresAt {
		return 0
	}
	return ev.Bypass.Count
}

// DevKey is the Ed25519 seed of bypass codes on the dev stack. It is public
// (it is in the source): only the dev stack uses it.
const DevKey = "d2FpdHJvb20tZGV2LW9ubHktYnlwYXNzLXNlZWQhISE="
