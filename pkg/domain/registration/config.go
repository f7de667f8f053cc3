// Package registration holds the rules of a registration that every transport
// answers the same way: the token configuration and signers, authorization of
// queue and admission tokens, the status vocabulary and what a line status
// means for a client, the item verdict, the ETA, and how errors map to HTTP.
// The api (JSON over HTTP) and the notifier (Server-Sent Events) are thin
// transports over it.
package registration

import (
	"cmp"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"

	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/security/token"
	"go.uber.org/zap"
)

// DevTokenKey is the HMAC key of queue tokens on the dev stack. It is public
// (it is in the source): only a TokenConfig with DevKeys set, which only the
// dev stack sets, uses it.
const DevTokenKey = "waitroom-dev-only-hmac-key-change-me-0123456789"

// DevAdmissionKey is the Ed25519 seed of admission tokens on the dev stack
// (public, like DevTokenKey).
const DevAdmissionKey = "d2FpdHJvb20tZGV2LW9ubHktZWQyNTUxOS1zZWVkISE="

// TokenConfig is the key material of the api and the notifier: the notifier
// verifies the api's queue tokens and signs the same admission tokens.
type TokenConfig struct {
	TokenAlg string `env:"WR_TOKEN_ALG" envDefault:"HS256"`
	TokenKey string `env:"WR_TOKEN_KEY" secret:"true"`
	TokenKID string `env:"WR_TOKEN_KID" envDefault:"k1"`
	// AdmissionAlg signs admission tokens: EdDSA (Ed25519), or ES256 (P-256)
	// for sites whose stack cannot verify EdDSA.
	AdmissionAlg string `env:"WR_ADMISSION_ALG" envDefault:"EdDSA"`
	AdmissionKey string `env:"WR_ADMISSION_KEY" secret:"true"` // base64 Ed25519 seed, or DER P-256 key with ES256
	AdmissionKID string `env:"WR_ADMISSION_KID" envDefault:"a1"`
	// AdmissionKeysExtra are the other keys of a rollover, "kid:seed" pairs
	// (comma-separated, each seed like WR_ADMISSION_KEY's): they verify
	// admission tokens and are published in the JWKS, but never sign.
	AdmissionKeysExtra string `env:"WR_ADMISSION_KEYS_EXTRA" secret:"true"`
	// DevKeys lets the built-in development keys stand in for missing ones.
	// No environment variable sets it: only the dev stack does, in code, so a
	// deployed service without keys refuses to start.
	DevKeys bool
}

// Validate checks the keys are there (or DevKeys stands in) and usable.
func (c TokenConfig) Validate() error {
	_, err := c.Signers(zap.NewNop())
	return err
}

// Signers are the two signers a transport needs.
type Signers struct {
	Queue     *token.Signer // queue tokens (HMAC or Ed25519)
	Admission *token.Signer // admission tokens (Ed25519 or P-256, published as JWKS)
}

// ErrNoKey says a key variable is unset outside the dev stack.
var ErrNoKey = errors.New("key not set")

// Signers builds the queue-token and admission-token signers. Outside the
// dev stack it refuses the development keys, even when given in the
// environment (config.ErrPublishedKey).
func (c TokenConfig) Signers(log *zap.Logger) (Signers, error) {
	qkey, akey := c.TokenKey, c.AdmissionKey
	alg := cmp.Or(c.AdmissionAlg, token.EdDSA)
	switch {
	case c.TokenAlg == token.ES256:
		return Signers{}, errors.New("WR_TOKEN_ALG: ES256 is for admission tokens (WR_ADMISSION_ALG); queue tokens are HS256 or EdDSA")
	case alg != token.EdDSA && alg != token.ES256:
		return Signers{}, fmt.Errorf("WR_ADMISSION_ALG is %q, not %s or %s", alg, token.EdDSA, token.ES256)
	case alg == token.ES256 && akey == "":
		return Signers{}, fmt.Errorf("WR_ADMISSION_KEY is required with WR_ADMISSION_ALG=ES256 (a base64 DER P-256 private key): %w", ErrNoKey)
	case alg == token.ES256 && c.AdmissionKeysExtra != "":
		return Signers{}, errors.New("WR_ADMISSION_KEYS_EXTRA holds Ed25519 keys: a rollover is for WR_ADMISSION_ALG=EdDSA")
	}
	if !c.DevKeys {
		if err := config.RefusePublished("WR_TOKEN_KEY", qkey, DevTokenKey); err != nil {
			return Signers{}, err
		}
		if err := config.RefusePublished("WR_ADMISSION_KEY", akey, DevAdmissionKey); err != nil {
			return Signers{}, err
		}
	}
	if qkey == "" {
		if !c.DevKeys {
			return Signers{}, fmt.Errorf("WR_TOKEN_KEY is not set: give the queue-token key (the built-in development keys are for the dev stack only): %w", ErrNoKey)
		}
		if c.TokenAlg != token.HS256 {
			return Signers{}, fmt.Errorf("WR_TOKEN_KEY is required with WR_TOKEN_ALG=%s: %w", c.TokenAlg, ErrNoKey)
		}
		log.Warn("WR_TOKEN_KEY not set: using the built-in development key (dev stack)")
		qkey = DevTokenKey
	}
	if akey == "" {
		if !c.DevKeys {
			return Signers{}, fmt.Errorf("WR_ADMISSION_KEY is not set: give the admission-token key, a base64 Ed25519 seed (the built-in development keys are for the dev stack only): %w", ErrNoKey)
		}
		log.Warn("WR_ADMISSION_KEY not set: using the built-in development key (dev stack)")
		akey = DevAdmissionKey
	}
	q, err := token.New(c.TokenAlg, qkey, c.TokenKID)
	if err != nil {
		return Signers{}, fmt.Errorf("WR_TOKEN_KEY: %w", err)
	}
	extra, err := ParseKeysExtra(c.AdmissionKeysExtra)
	if err != nil {
		return Signers{}, fmt.Errorf("WR_ADMISSION_KEYS_EXTRA: %w", err)
	}
	if !c.DevKeys {
		if dev, err := token.Ed25519Seed(DevAdmissionKey); err == nil {
			for _, k := range extra {
				if k.Key.Equal(dev.Public()) {
					return Signers{}, fmt.Errorf("WR_ADMISSION_KEYS_EXTRA: key %q is a development key published in waitroom's source, with which anyone can sign: drop it: %w", k.KID, config.ErrPublishedKey)
				}
			}
		}
	}
	var opts []token.Option
	if len(extra) > 0 {
		opts = append(opts, token.VerifyAlso(extra...))
	}
	a, err := token.New(alg, akey, c.AdmissionKID, opts...)
	if err != nil {
		if len(extra) > 0 {
			return Signers{}, fmt.Errorf("WR_ADMISSION_KEY, WR_ADMISSION_KID and WR_ADMISSION_KEYS_EXTRA: %w", err)
		}
		return Signers{}, fmt.Errorf("WR_ADMISSION_KEY: %w", err)
	}
	return Signers{Queue: q, Admission: a}, nil
}

// ParseKeysExtra reads WR_ADMISSION_KEYS_EXTRA: "kid:seed" pairs separated by
// commas, each seed a base64 Ed25519 seed; kids are ids ([A-Za-z0-9._-], 1-64).
// Only the public half of each key is kept.
func ParseKeysExtra(v string) ([]token.VerifyKey, error) {
	var out []token.VerifyKey
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		kid, seed, ok := strings.Cut(part, ":")
		if !ok || !validKID(kid) {
			return nil, errors.New(`each entry must be "kid:base64-seed" with a kid of 1-64 characters of [A-Za-z0-9._-]`)
		}
		priv, err := token.Ed25519Seed(strings.TrimSpace(seed))
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", kid, err)
		}
		out = append(out, token.VerifyKey{KID: kid, Key: priv.Public().(ed25519.PublicKey)})
	}
	return out, nil
}

func validKID(kid string) bool {
	if len(kid) == 0 || len(kid) > 64 {
		return false
	}
	for _, r := range kid {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
