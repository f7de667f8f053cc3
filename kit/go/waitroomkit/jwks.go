package waitroomkit

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// keySet is the api's JWKS, cached. A request never waits for a refresh
// while it holds the key it needs: keys older than maxAge are fetched again
// in the background and served meanwhile. Only a kid the set does not hold
// waits, for at most timeout, for a fetch (at most one per minRefresh).
// A fetch that fails keeps the keys and is retried after an exponential
// backoff (backoffMin doubling up to backoffMax), so an api that is down
// costs one fetch per backoff however many requests arrive.
type keySet struct {
	url        string
	client     *http.Client
	minRefresh time.Duration
	maxAge     time.Duration
	timeout    time.Duration
	backoffMin time.Duration
	backoffMax time.Duration
	now        func() time.Time

	life   context.Context // the Kit's: Close cancels the fetches under way
	cancel context.CancelFunc
	wg     sync.WaitGroup // the fetches and the refresh loop

	mu       sync.Mutex
	keys     map[string]crypto.PublicKey
	fetched  time.Time     // last successful fetch
	tried    time.Time     // last attempt
	failures int           // consecutive failed fetches
	lastErr  error         // of the last fetch, nil once one succeeds
	inflight chan struct{} // closed when the fetch under way ends; nil when none
	closed   bool
}

func newKeySet(url string) *keySet {
	life, cancel := context.WithCancel(context.Background())
	return &keySet{url: url, minRefresh: 10 * time.Second, maxAge: 5 * time.Minute, timeout: 2 * time.Second,
		backoffMin: time.Second, backoffMax: time.Minute, now: time.Now, life: life, cancel: cancel}
}

// key returns the public key of kid ("" when the token names none: the one
// key, if the set holds exactly one). It waits (at most until ctx is done or
// the fetch's timeout) only when the set does not hold kid.
func (s *keySet) key(ctx context.Context, kid string) (crypto.PublicKey, error) {
	s.mu.Lock()
	if k, ok := s.lookupLocked(kid); ok {
		if s.mayFetchLocked(false) { // stale: fetch in the background, serve k meanwhile
			s.startFetchLocked()
		}
		s.mu.Unlock()
		return k, nil
	}
	// Unknown kid: maybe a rotation, so fetch (rate-limited) and wait.
	done := s.inflight
	if done == nil && s.mayFetchLocked(true) {
		done = s.startFetchLocked()
	}
	s.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: wait for the JWKS: %w", ErrUnavailable, ctx.Err())
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.lookupLocked(kid); ok {
		return k, nil
	}
	if s.lastErr != nil {
		// The api cannot say whether kid is one of its keys.
		return nil, s.lastErr
	}
	return nil, fmt.Errorf("no key %q in the JWKS", kid)
}

func (s *keySet) lookupLocked(kid string) (crypto.PublicKey, bool) {
	if kid == "" && len(s.keys) == 1 {
		for _, k := range s.keys {
			return k, true
		}
	}
	k, ok := s.keys[kid]
	return k, ok
}

// mayFetchLocked says whether a fetch may start now: never while one is
// under way or during the backoff after a failure; for an unknown kid
// (force) at most once per minRefresh once keys are held; otherwise when the
// keys are older than maxAge.
func (s *keySet) mayFetchLocked(force bool) bool {
	now := s.now()
	switch {
	case s.closed || s.inflight != nil:
		return false
	case s.failures > 0 && now.Sub(s.tried) < s.backoff(s.failures):
		return false
	case s.keys == nil:
		return true
	case force:
		return now.Sub(s.tried) >= s.minRefresh
	default:
		return now.Sub(s.fetched) > s.maxAge
	}
}

// backoff is the wait after n consecutive failures: backoffMin·2^(n-1),
// at most backoffMax.
func (s *keySet) backoff(n int) time.Duration {
	d := s.backoffMin
	for i := 1; i < n && d < s.backoffMax; i++ {
		d *= 2
	}
	return min(d, s.backoffMax)
}

// startFetchLocked starts a fetch in the background, bounded by timeout and
// by Close, and returns the channel closed when it ends.
func (s *keySet) startFetchLocked() chan struct{} {
	done := make(chan struct{})
	s.inflight = done
	s.tried = s.now()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.life, s.timeout)
		keys, err := s.fetch(ctx)
		cancel()
		s.mu.Lock()
		if err != nil {
			s.failures++
			s.lastErr = err
		} else {
			s.keys, s.fetched, s.failures, s.lastErr = keys, s.now(), 0, nil
		}
		s.inflight = nil
		s.mu.Unlock()
		close(done)
	}()
	return done
}

// refresh fetches the set now, unless a fetch is under way (then it waits for
// that one) or the backoff after a failure forbids it (then it returns the
// last error); it returns the fetch's error.
func (s *keySet) refresh(ctx context.Context) error {
	s.mu.Lock()
	done := s.inflight
	if done == nil {
		if s.closed || (s.failures > 0 && s.now().Sub(s.tried) < s.backoff(s.failures)) {
			err := s.lastErr
			if s.closed {
				err = fmt.Errorf("%w: the kit is closed", ErrUnavailable)
			}
			s.mu.Unlock()
			return err
		}
		done = s.startFetchLocked()
	}
	s.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("%w: wait for the JWKS: %w", ErrUnavailable, ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// run keeps the keys fresh until ctx is done or the set is closed: it
// fetches them when they reach maxAge, and after a failure when the backoff
// has passed, so requests find fresh keys without asking.
func (s *keySet) run(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.life.Done():
			return
		case <-t.C:
		}
		_ = s.refresh(ctx) // a failure keeps the keys; the next round retries
		t.Reset(s.untilDue())
	}
}

// untilDue is how long until the next fetch of the refresh loop.
func (s *keySet) untilDue() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var d time.Duration
	if s.failures > 0 {
		d = s.tried.Add(s.backoff(s.failures)).Sub(now)
	} else {
		d = s.fetched.Add(s.maxAge).Sub(now)
	}
	return max(d, 10*time.Millisecond)
}

// close stops the refresh loop and the fetches under way, and waits for them.
func (s *keySet) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
}

func (s *keySet) fetch(ctx context.Context) (map[string]crypto.PublicKey, error) {
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

// parseJWKS keeps the signing keys of a JWKS the api may sign admission
// tokens with: Ed25519 (RFC 8037, EdDSA) and P-256 (ES256); it passes over
// any other key, so a set that also holds RSA keys still works.
func parseJWKS(b []byte) (map[string]crypto.PublicKey, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	out := map[string]crypto.PublicKey{}
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		if pub, ok := publicKeyOf(k); ok {
			out[k.Kid] = pub
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no Ed25519 or P-256 signing key")
	}
	return out, nil
}

// publicKeyOf is k's key when it is one admission tokens may be signed with.
func publicKeyOf(k jwk) (crypto.PublicKey, bool) {
	x, err := base64.RawURLEncoding.DecodeString(k.X)
	if err != nil {
		return nil, false
	}
	switch {
	case k.Kty == "OKP" && k.Crv == "Ed25519" && (k.Alg == "" || k.Alg == AlgEdDSA) && len(x) == ed25519.PublicKeySize:
		return ed25519.PublicKey(x), true
	case k.Kty == "EC" && k.Crv == "P-256" && (k.Alg == "" || k.Alg == AlgES256):
		y, err := base64.RawURLEncoding.DecodeString(k.Y)
		if err != nil || len(x) != 32 || len(y) != 32 {
			return nil, false
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return nil, false
		}
		return pub, true
	}
	return nil, false
}
