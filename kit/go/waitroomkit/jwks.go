package waitroomkit

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// keySet is the api's JWKS, cached: fetched on first use, again when older
// than maxAge, and on a kid it does not know, at most once per minRefresh.
type keySet struct {
	url        string
	client     *http.Client
	minRefresh time.Duration
	maxAge     time.Duration
	now        func() time.Time

	mu      sync.RWMutex
	keys    map[string]ed25519.PublicKey
	fetched time.Time // last successful fetch
	tried   time.Time // last attempt
	fetchMu sync.Mutex
}

// key returns the public key of kid ("" when the token names none: the one
// key, if the set holds exactly one).
func (s *keySet) key(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	k, ok, stale := s.lookup(kid)
	if ok && !stale {
		return k, nil
	}
	// Unknown kid: maybe a rotation, refetch (rate-limited). Stale: refetch,
	// but a failure keeps the keys we have.
	err := s.refresh(ctx, !ok)
	if k2, ok2, _ := s.lookup(kid); ok2 {
		return k2, nil
	}
	if err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no key %q in the JWKS", kid)
}

func (s *keySet) lookup(kid string) (ed25519.PublicKey, bool, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	stale := s.keys == nil || s.now().Sub(s.fetched) > s.maxAge
	if kid == "" && len(s.keys) == 1 {
		for _, k := range s.keys {
			return k, true, stale
		}
	}
	k, ok := s.keys[kid]
	return k, ok, stale
}

// refresh fetches the set unless another caller just did, or (unless never
// fetched) the last attempt was less than minRefresh ago. Concurrent callers
// share one fetch.
func (s *keySet) refresh(ctx context.Context, force bool) error {
	start := s.now()
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	s.mu.RLock()
	fetched, tried, have := s.fetched, s.tried, s.keys != nil
	s.mu.RUnlock()
	if have && !fetched.Before(start) {
		return nil // fetched while we waited
	}
	if have && force && s.now().Sub(tried) < s.minRefresh {
		return nil // rate limit: an unknown kid waits for the next window
	}
	if have && !force && s.now().Sub(fetched) <= s.maxAge {
		return nil
	}
	keys, err := s.fetch(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tried = s.now()
	if err != nil {
		if s.keys != nil {
			return nil // keep serving the keys we have
		}
		return err
	}
	s.keys, s.fetched = keys, s.now()
	return nil
}

type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

func (s *keySet) fetch(ctx context.Context) (map[string]ed25519.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: build JWKS request: %w", ErrUnavailable, err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: fetch JWKS %s: %w", ErrUnavailable, s.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: fetch JWKS %s: status %d", ErrUnavailable, s.url, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%w: read JWKS %s: %w", ErrUnavailable, s.url, err)
	}
	keys, err := parseJWKS(b)
	if err != nil {
		return nil, fmt.Errorf("%w: JWKS %s: %w", ErrUnavailable, s.url, err)
	}
	return keys, nil
}

// parseJWKS keeps the Ed25519 signing keys of a JWKS (RFC 8037) and passes
// over any other key, so a set that also holds RSA keys still works.
func parseJWKS(b []byte) (map[string]ed25519.PublicKey, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	out := map[string]ed25519.PublicKey{}
	for _, k := range set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" || (k.Alg != "" && k.Alg != Alg) || (k.Use != "" && k.Use != "sig") {
			continue
		}
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			continue
		}
		out[k.Kid] = ed25519.PublicKey(x)
	}
	if len(out) == 0 {
		return nil, errors.New("no Ed25519 signing key")
	}
	return out, nil
}
