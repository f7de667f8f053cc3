package waitroomkit

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// What the kit does for an item when the room cannot answer (its keys
// cannot be fetched, or the api is known to be down).
const (
	// FailClosed holds people: a token the kit cannot check is answered 503,
	// and a visitor without one is sent to the waiting page (the default).
	FailClosed = "closed"
	// FailOpen lets people through unchecked while the room is down.
	FailOpen = "open"
)

// The off switch of an item, set by the operator in the signed flag.
const (
	// OffThrough sends everyone straight through, token or not.
	OffThrough = "through"
	// OffPaused shows everyone a static "sale paused" page (503).
	OffPaused = "paused"
)

// Why a request went through without a checked token (Admission.Unchecked).
const (
	UncheckedOff      = "off-switch"
	UncheckedFailOpen = "fail-open"
)

// FlagIssuer is the iss of a flag (SignFlag).
const FlagIssuer = "waitroom-flag"

// ItemFlag is the operator's word for one item: its failure mode and its
// off switch ("" each: the kit's defaults, no switch).
type ItemFlag struct {
	FailMode string `json:"failMode,omitempty"` // FailOpen or FailClosed
	Off      string `json:"off,omitempty"`      // OffThrough or OffPaused
}

// Flag is the signed static document the kit reads from a URL or a file the
// operator controls (WithFlag): per item and by default, how the kit fails
// and whether the room is switched off. It needs nothing of the room to be
// read: a file on the shop's disk or an object on a static host works while
// the api, Kafka and Redis are all down.
type Flag struct {
	IssuedAt time.Time           // a flag older than the one held is refused (no replay)
	Default  ItemFlag            // for every item Items does not name
	Items    map[string]ItemFlag // by item id
}

type flagClaims struct {
	Default ItemFlag            `json:"default"`
	Items   map[string]ItemFlag `json:"items,omitempty"`
	jwt.RegisteredClaims
}

func (f ItemFlag) check() error {
	switch {
	case f.FailMode != "" && f.FailMode != FailOpen && f.FailMode != FailClosed:
		return fmt.Errorf("failMode %q is not open or closed", f.FailMode)
	case f.Off != "" && f.Off != OffThrough && f.Off != OffPaused:
		return fmt.Errorf("off %q is not through or paused", f.Off)
	}
	return nil
}

// SignFlag signs f with the operator's Ed25519 key: a compact JWS (EdDSA)
// to publish where the kits read it.
func SignFlag(key ed25519.PrivateKey, f Flag) (string, error) {
	for item, it := range f.Items {
		if err := it.check(); err != nil {
			return "", fmt.Errorf("waitroomkit: flag item %s: %w", item, err)
		}
	}
	if err := f.Default.check(); err != nil {
		return "", fmt.Errorf("waitroomkit: flag default: %w", err)
	}
	if f.IssuedAt.IsZero() {
		f.IssuedAt = time.Now()
	}
	c := flagClaims{Default: f.Default, Items: f.Items, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: FlagIssuer, IssuedAt: jwt.NewNumericDate(f.IssuedAt)}}
	s, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c).SignedString(key)
	if err != nil {
		return "", fmt.Errorf("waitroomkit: sign flag: %w", err)
	}
	return s, nil
}

// ParseFlagKey reads the operator's flag key: a base64 Ed25519 seed of 32
// bytes (head -c 32 /dev/urandom | base64), as waitroomflag and waitroomctl
// take it. The kits verify with its public half.
func ParseFlagKey(b64 string) (ed25519.PrivateKey, error) {
	seed, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, errors.New("waitroomkit: a flag key is a base64 Ed25519 seed of 32 bytes")
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// Apply changes f by the operator's words, comma-separated: open or closed
// (the fail mode), through or paused (the off switch), on (no switch).
func (f *ItemFlag) Apply(words string) error {
	for _, w := range strings.Split(words, ",") {
		switch w = strings.TrimSpace(w); w {
		case FailOpen, FailClosed:
			f.FailMode = w
		case OffThrough, OffPaused:
			f.Off = w
		case "on":
			f.Off = ""
		default:
			return fmt.Errorf("%q is not open, closed, through, paused or on", w)
		}
	}
	return nil
}

// VerifyFlag checks a signed flag (SignFlag) with pub and returns what it
// says, as a kit would take it (an issue time up to a minute ahead passes).
func VerifyFlag(raw string, pub ed25519.PublicKey) (Flag, error) {
	f, err := parseFlag(strings.TrimSpace(raw), pub, time.Now)
	if err != nil {
		return Flag{}, fmt.Errorf("waitroomkit: flag: %w", err)
	}
	return *f, nil
}

// flagSource reads, checks and caches the flag: the last good one is kept
// through any failure to read the next.
type flagSource struct {
	src    string // https URL, loopback http URL, or a file path
	pub    ed25519.PublicKey
	every  time.Duration
	client *http.Client
	parser *jwt.Parser

	cache string // WithFlagCache: where the last good flag is kept across restarts

	mu      sync.Mutex
	cur     *Flag
	raw     string // cur as read (what the cache holds)
	checked time.Time
	lastErr error
	busy    bool
}

// WithFlag makes the kit read the operator's signed flag (SignFlag) from
// src, an https URL (http on a loopback host) or a file path, verified with
// pub, again every refresh (Start keeps it fresh; without Start a request
// that finds it stale rereads it in the background). The last good flag is
// kept while src cannot be read or holds a flag that does not verify.
func WithFlag(src string, pub ed25519.PublicKey, refresh time.Duration) Option {
	return func(k *Kit) {
		k.flag = &flagSource{src: src, pub: pub, every: refresh}
	}
}

// WithFlagCache keeps the last good flag (WithFlag) in the file path, so a
// restarted site starts with it even while the flag's source cannot be read:
// New reads the file (verified as the source is; a missing or bad file is
// no flag), and each newer flag read replaces it (written beside it and
// renamed, never half). It also carries the replay guard across restarts: a
// source serving a flag older than the cached one is refused. Writing is
// best effort: a cache that cannot be written is only missing at the next
// start.
func WithFlagCache(path string) Option { return func(k *Kit) { k.flagCache = path } }

// WithFailMode sets how the kit fails for items the flag does not name
// (default FailClosed).
func WithFailMode(mode string) Option { return func(k *Kit) { k.failMode = mode } }

// WithPausedPage replaces the page the off switch OffPaused shows (default:
// a short 503 page with Retry-After: 30).
func WithPausedPage(h http.Handler) Option { return func(k *Kit) { k.paused = h } }

// RefreshFlag reads the flag now and returns why it could not be taken (the
// last good one stays). Without WithFlag it does nothing.
func (k *Kit) RefreshFlag(ctx context.Context) error {
	if k.flag == nil {
		return nil
	}
	return k.flag.refresh(ctx, k.now)
}

// CurrentFlag is the flag in force (ok false: none read yet).
func (k *Kit) CurrentFlag() (Flag, bool) {
	if k.flag == nil {
		return Flag{}, false
	}
	k.flag.mu.Lock()
	defer k.flag.mu.Unlock()
	if k.flag.cur == nil {
		return Flag{}, false
	}
	return *k.flag.cur, true
}

func (s *flagSource) refresh(ctx context.Context, now func() time.Time) error {
	raw, err := s.read(ctx)
	var f *Flag
	if err == nil {
		f, err = s.parse(raw, now)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checked = now()
	if err == nil && s.cur != nil && f.IssuedAt.Before(s.cur.IssuedAt) {
		err = fmt.Errorf("flag issued %s, older than the one held (%s)", f.IssuedAt.UTC().Format(time.RFC3339), s.cur.IssuedAt.UTC().Format(time.RFC3339))
	}
	if err != nil {
		s.lastErr = fmt.Errorf("waitroomkit: flag %s: %w", s.src, err)
		return s.lastErr
	}
	if s.cache != "" && raw != s.raw {
		_ = WriteFlagFile(s.cache, raw) // best effort (WithFlagCache)
	}
	s.cur, s.raw, s.lastErr = f, raw, nil
	return nil
}

// loadCache takes the flag kept in the cache file (WithFlagCache), if it
// verifies: the flag in force until the source is read.
func (s *flagSource) loadCache(now func() time.Time) {
	if s.cache == "" {
		return
	}
	b, err := os.ReadFile(s.cache)
	if err != nil {
		return
	}
	raw := strings.TrimSpace(string(b))
	if f, err := s.parse(raw, now); err == nil {
		s.cur, s.raw = f, raw
	}
}

// WriteFlagFile writes a signed flag (SignFlag) to path, where kits read it
// (WithFlag) or keep it (WithFlagCache): into a temporary file beside it,
// renamed over it, so a kit reading meanwhile (or a crash) sees the old flag
// or the new one, never half of one.
func WriteFlagFile(path, flag string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("waitroomkit: write flag: %w", err)
	}
	defer os.Remove(tmp.Name()) // nothing left after the rename
	_, err = tmp.WriteString(strings.TrimSpace(flag) + "\n")
	if err == nil {
		err = tmp.Chmod(0o644) // kits under another user read it
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("waitroomkit: write flag %s: %w", path, err)
	}
	return nil
}

func (s *flagSource) read(ctx context.Context) (string, error) {
	if !strings.HasPrefix(s.src, "https://") && !strings.HasPrefix(s.src, "http://") {
		b, err := os.ReadFile(s.src)
		if err != nil {
			return "", fmt.Errorf("read: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.src, nil)
	if err != nil {
		return "", fmt.Errorf("build request: %w", err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("fetch: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("fetch: status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	if err != nil {
		return "", fmt.Errorf("fetch: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (s *flagSource) parse(raw string, now func() time.Time) (*Flag, error) {
	return parseFlag(raw, s.pub, now)
}

func parseFlag(raw string, pub ed25519.PublicKey, now func() time.Time) (*Flag, error) {
	var c flagClaims
	_, err := jwt.NewParser(jwt.WithValidMethods([]string{AlgEdDSA}), jwt.WithIssuer(FlagIssuer),
		jwt.WithIssuedAt(), jwt.WithLeeway(time.Minute), jwt.WithTimeFunc(now)).
		ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return pub, nil })
	switch {
	case err != nil:
		return nil, fmt.Errorf("verify: %w", err)
	case c.IssuedAt == nil:
		return nil, errors.New("verify: no iat")
	}
	if err := c.Default.check(); err != nil {
		return nil, fmt.Errorf("default: %w", err)
	}
	for item, it := range c.Items {
		if err := it.check(); err != nil {
			return nil, fmt.Errorf("item %s: %w", item, err)
		}
	}
	return &Flag{IssuedAt: c.IssuedAt.Time, Default: c.Default, Items: c.Items}, nil
}

// itemFlag is what the flag says for item, the kit's fail mode filling a
// blank one. A stale flag is reread in the background (served meanwhile).
func (k *Kit) itemFlag(item string) ItemFlag {
	f := ItemFlag{}
	if s := k.flag; s != nil {
		s.mu.Lock()
		if s.cur != nil {
			f = s.cur.Default
			if it, ok := s.cur.Items[item]; ok {
				if it.FailMode != "" {
					f.FailMode = it.FailMode
				}
				f.Off = it.Off // an item's own switch, even "" (on), wins
			}
		}
		if !s.busy && k.now().Sub(s.checked) >= s.every {
			s.busy = true
			s.wgAdd(k)
			go func() {
				defer k.keys.wg.Done()
				_ = s.refresh(k.keys.life, k.now)
				s.mu.Lock()
				s.busy = false
				s.mu.Unlock()
			}()
		}
		s.mu.Unlock()
	}
	if f.FailMode == "" {
		f.FailMode = k.failMode
	}
	return f
}

// wgAdd counts a background read with the key set's fetches, so Close waits
// for it.
func (s *flagSource) wgAdd(k *Kit) { k.keys.wg.Add(1) }

// runFlag keeps the flag fresh until ctx is done or the kit is closed.
func (k *Kit) runFlag(ctx context.Context) {
	defer k.keys.wg.Done()
	t := time.NewTicker(k.flag.every)
	defer t.Stop()
	for {
		_ = k.flag.refresh(ctx, k.now)
		select {
		case <-ctx.Done():
			return
		case <-k.keys.life.Done():
			return
		case <-t.C:
		}
	}
}

// down reports that the room is known not to answer: the last fetch of its
// keys failed.
func (s *keySet) down() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr != nil
}

// downNow is down for a visitor with no token on an item that fails open:
// when the room was last heard from (or tried) at least minRefresh ago, it
// asks again first (one fetch for every caller, bounded by the fetch's
// timeout and ctx), so such a visitor fails open within about minRefresh of
// the room going down, not only once the keys reach maxAge. A fetch already
// under way is not waited for: its answer decides the next visitors.
func (s *keySet) downNow(ctx context.Context) bool {
	s.mu.Lock()
	if s.lastErr != nil || s.inflight != nil || s.closed || s.now().Sub(s.tried) < s.minRefresh {
		down := s.lastErr != nil
		s.mu.Unlock()
		return down
	}
	done := s.startFetchLocked()
	s.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return false // the visitor left: the fetch still decides the next ones
	}
	return s.down()
}

func pausedPage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Retry-After", "30")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sale paused</title></head>`+
		`<body><main><h1>The sale is paused</h1><p>Please try again in a few minutes.</p></main></body></html>`)
}
