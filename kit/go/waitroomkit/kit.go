// Package waitroomkit protects a site behind a waitroom waiting room: it lets
// a request through only with a live admission token, verified offline with
// the api's JWKS (and optionally online), and completes the admission at the
// end of checkout. It depends on nothing of waitroom but its HTTP API.
//
//	kit, err := waitroomkit.New("https://queue.example.com")
//	defer kit.Close()
//	kit.Start(ctx) // keys fetched now and kept fresh in the background
//	mux.Handle("GET /shop/{itemId}", kit.Protect(waitroomkit.ItemFromPath("itemId"))(shop))
//	// at the end of checkout:
//	kit.CompleteRequest(w, r)
//
// With WithAutoEntry, items the operator set to mode auto show no waiting
// page while they have room: the kit registers the visitor and lets them
// through with the admission the room answers.
//
// Versions: the module is github.com/waitroom/waitroom/kit/go/waitroomkit,
// one module with no replace (gin's middleware is its package waitroomgin),
// released by tags kit/go/waitroomkit/vX.Y.Z of the waitroom repository
// (go get github.com/waitroom/waitroom/kit/go/waitroomkit@v0.1.0). Its go line
// is the previous Go release, so a shop need not run the newest one. Before
// v1 a minor version may change the API; the tokens and routes it reads are
// the api's (/.well-known/jwks.json, /api/v1/admissions/...), and a kit keeps
// working with any api of the same major version.
package waitroomkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// What an admission token is refused for; callers branch on them with errors.Is.
var (
	ErrNoToken   = errors.New("waitroomkit: no admission token")
	ErrInvalid   = errors.New("waitroomkit: admission token invalid")
	ErrExpired   = errors.New("waitroomkit: admission token expired")
	ErrOtherItem = errors.New("waitroomkit: admission token is for another item")
	ErrEnded     = errors.New("waitroomkit: admission ended (completed or expired)")
	// ErrBlocked: the operator blocked the admission's user (the api's
	// 403 BLOCKED, online only).
	ErrBlocked     = errors.New("waitroomkit: user blocked by the operator")
	ErrUnavailable = errors.New("waitroomkit: waitroom api unavailable")
)

// The claims waitroom's api signs admission tokens with (pkg/security/token).
const (
	Issuer   = "waitroom"
	Audience = "waitroom-admission"
	// AlgEdDSA and AlgES256 are the algorithms accepted: the api signs
	// admission tokens with Ed25519, or P-256 where the operator chose
	// WR_ADMISSION_ALG=ES256, and publishes the public keys, so nothing else
	// is valid (no "none", no HMAC with a public key as the secret).
	AlgEdDSA = "EdDSA"
	AlgES256 = "ES256"
	// Alg is AlgEdDSA, the api's default.
	Alg = AlgEdDSA
	// MaxTokenBytes is the longest token read (the api's own limit).
	MaxTokenBytes = 4096
)

// Admission is what a verified admission token says: user UserID may buy
// ItemID until ExpiresAt. Raw is the token itself.
type Admission struct {
	TokenID   string
	ItemID    string
	UserID    string
	ExpiresAt time.Time
	// IssuedAt is when the api handed the admission out (its iat; zero when
	// absent): the start of the arrival delay Health measures.
	IssuedAt time.Time
	Raw      string
	// Unchecked says why a request went through with no checked token
	// (UncheckedOff, UncheckedFailOpen); only ItemID is set then. "" for
	// a verified token.
	Unchecked string
}

// APIError is an answer of the waitroom api that was not a success, with the
// api's error code (TOKEN_INVALID, ADMISSION_ENDED, VIEW_REBUILDING…).
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("waitroom api answered %d %s: %s", e.Status, e.Code, e.Message)
}

// Kit verifies and completes admissions for one waitroom api. It is safe for
// concurrent use; build one per process and share it.
type Kit struct {
	api    string
	wait   string
	client *http.Client
	keys   *keySet
	parser *jwt.Parser
	online bool
	// verifyTimeout bounds the online check of one request.
	verifyTimeout time.Duration
	asserter      *Asserter
	userOf        func(*http.Request) (string, bool)
	cookie        string
	param         string
	secure        bool
	now           func() time.Time
	denied        func(w http.ResponseWriter, r *http.Request, item string, err error)
	doneMu        sync.Mutex
	done          map[string]time.Time // tokenIds completed through this Kit → their expiry
	doneSeen      time.Time
	flag          *flagSource
	flagCache     string // WithFlagCache
	failMode      string
	paused        http.Handler
	auto          *autoState // nil: no auto entry (WithAutoEntry)
}

// Option configures a Kit.
type Option func(*Kit)

// WithHTTPClient sets the client for the JWKS, verify and complete calls
// (default: 5 s timeout).
func WithHTTPClient(c *http.Client) Option { return func(k *Kit) { k.client = c } }

// WithJWKSURL sets where the public keys are (default: the api's
// /.well-known/jwks.json).
func WithJWKSURL(u string) Option { return func(k *Kit) { k.keys.url = u } }

// WithWaitURL sets the origin of the waiting-room page people are sent to
// (default: the api's URL); "" makes the redirect a path on the same origin.
func WithWaitURL(base string) Option { return func(k *Kit) { k.wait = strings.TrimRight(base, "/") } }

// WithOnlineVerify makes every check also ask the api (POST
// /api/v1/admissions/verify), which knows an admission completed elsewhere:
// one round trip per request, bounded by WithOnlineVerifyTimeout. When the
// api cannot answer (5xx, network, timeout), the offline verdict stands, so
// the shop stays open while the room is rebuilt or down.
func WithOnlineVerify() Option { return func(k *Kit) { k.online = true } }

// WithOnlineVerifyTimeout bounds the online check of one request (default
// 2 s): past it, the offline verdict stands.
func WithOnlineVerifyTimeout(d time.Duration) Option { return func(k *Kit) { k.verifyTimeout = d } }

// WithLeeway sets the clock skew allowed on exp and iat (default 5 s).
func WithLeeway(d time.Duration) Option {
	return func(k *Kit) { k.parser = newParser(d, k.clock) }
}

// WithKeyRefresh sets how often an unknown kid may refetch the JWKS at most
// (default 10 s: a flood of forged kids costs one fetch per interval) and how
// old the keys may get before they are fetched again, in the background
// (default 5 min).
func WithKeyRefresh(minInterval, maxAge time.Duration) Option {
	return func(k *Kit) { k.keys.minRefresh, k.keys.maxAge = minInterval, maxAge }
}

// WithKeyRefreshTimeout bounds one fetch of the JWKS (default 2 s), and so
// the longest a request waits for keys: only a request whose kid the cache
// does not hold waits at all.
func WithKeyRefreshTimeout(d time.Duration) Option { return func(k *Kit) { k.keys.timeout = d } }

// WithKeyBackoff sets the wait before fetching the JWKS again after a failed
// fetch: first, doubling after each further failure up to max (default 1 s
// to 1 min). The keys already held keep being served meanwhile.
func WithKeyBackoff(first, max time.Duration) Option {
	return func(k *Kit) { k.keys.backoffMin, k.keys.backoffMax = first, max }
}

// WithCookie names the cookie the middleware keeps the token in (default
// "waitroom_admission"; the item is appended) and whether it is Secure
// (default: when the request came over TLS).
func WithCookie(prefix string, secure bool) Option {
	return func(k *Kit) { k.cookie, k.secure = prefix, secure }
}

// WithTokenParam names the query parameter the waiting page's "continue"
// link carries the token in (default "admission", as in the api's default
// WR_PAGE_TARGET_URL).
func WithTokenParam(name string) Option { return func(k *Kit) { k.param = name } }

// WithDenied replaces what the middleware does with a request it refuses
// (default: 303 to the waiting page, or 503 when the keys cannot be fetched).
func WithDenied(f func(w http.ResponseWriter, r *http.Request, item string, err error)) Option {
	return func(k *Kit) { k.denied = f }
}

// WithClock sets the clock tokens are checked against (tests).
func WithClock(now func() time.Time) Option { return func(k *Kit) { k.now = now; k.keys.now = now } }

// New returns a Kit for the waitroom api at apiURL (e.g.
// "https://queue.example.com"). The api and the JWKS must be https, but on a
// loopback host (127.0.0.0/8, ::1, localhost): over plain http anyone on
// the path could serve their own keys. New fetches nothing yet (it reads
// only WithFlagCache's local file): keys are fetched on the first token, by
// Refresh, or kept fresh by Start. Close stops the fetches under way.
func New(apiURL string, opts ...Option) (*Kit, error) {
	if err := checkURL("api", apiURL); err != nil {
		return nil, err
	}
	api := strings.TrimRight(apiURL, "/")
	k := &Kit{api: api, wait: api, client: &http.Client{Timeout: 5 * time.Second}, cookie: "waitroom_admission",
		param: "admission", now: time.Now, done: map[string]time.Time{}, verifyTimeout: 2 * time.Second, failMode: FailClosed}
	k.keys = newKeySet(api + "/.well-known/jwks.json")
	k.parser = newParser(5*time.Second, k.clock)
	for _, o := range opts {
		o(k)
	}
	k.keys.client = k.client
	switch {
	case k.keys.minRefresh < 0 || k.keys.maxAge <= 0 || k.keys.timeout <= 0 || k.verifyTimeout <= 0:
		return nil, errors.New("waitroomkit: key refresh intervals and timeouts must be positive")
	case k.keys.backoffMin <= 0 || k.keys.backoffMax < k.keys.backoffMin:
		return nil, errors.New("waitroomkit: the key backoff must be positive, its max at least its first wait")
	case k.asserter != nil && k.userOf == nil:
		return nil, errors.New("waitroomkit: WithAssertions needs a function that names the user")
	case k.failMode != FailOpen && k.failMode != FailClosed:
		return nil, fmt.Errorf("waitroomkit: fail mode %q is not open or closed", k.failMode)
	}
	if k.flagCache != "" && k.flag == nil {
		return nil, errors.New("waitroomkit: WithFlagCache needs WithFlag")
	}
	if f := k.flag; f != nil {
		switch {
		case len(f.pub) != 32 || f.every <= 0:
			return nil, errors.New("waitroomkit: WithFlag needs an Ed25519 public key and a positive refresh")
		case strings.HasPrefix(f.src, "http://") || strings.HasPrefix(f.src, "https://"):
			if err := checkURL("flag", f.src); err != nil {
				return nil, err
			}
		}
		f.client = k.client
	}
	if err := checkURL("JWKS", k.keys.url); err != nil {
		return nil, err
	}
	if f := k.flag; f != nil {
		f.cache = k.flagCache
		f.loadCache(k.now) // the flag in force until the source is read
	}
	return k, nil
}

// checkURL refuses a URL that is not https, but http on a loopback host.
func checkURL(what, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("waitroomkit: %s URL %q is not an http(s) URL", what, raw)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		h := u.Hostname()
		if ip := net.ParseIP(h); strings.EqualFold(h, "localhost") || (ip != nil && ip.IsLoopback()) {
			return nil
		}
		return fmt.Errorf("waitroomkit: %s URL %q is plain http on a host that is not loopback; use https", what, raw)
	}
	return fmt.Errorf("waitroomkit: %s URL %q is not an http(s) URL", what, raw)
}

// Start keeps the keys (and the flag, WithFlag) fresh in the background
// until ctx is done or Close is called: it fetches them now, again before they reach the maxAge of
// WithKeyRefresh, and after a failure once the backoff has passed, so no
// request waits for keys. Without Start, keys are fetched as requests need
// them (a request waits only for a kid the cache does not hold).
func (k *Kit) Start(ctx context.Context) {
	s := k.keys
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.wg.Add(1)
	go s.run(ctx)
	if k.flag != nil {
		s.wg.Add(1)
		go k.runFlag(ctx)
	}
}

// Close stops the background refresh (Start) and any fetch of the keys under
// way, and waits for them. The Kit still verifies with the keys it holds,
// but fetches no more.
func (k *Kit) Close() error {
	k.keys.close()
	return nil
}

func (k *Kit) clock() time.Time { return k.now() }

func newParser(leeway time.Duration, now func() time.Time) *jwt.Parser {
	return jwt.NewParser(
		jwt.WithValidMethods([]string{AlgEdDSA, AlgES256}), // pinned: no "none", no HS256 with the public key as secret
		jwt.WithIssuer(Issuer),
		jwt.WithAudience(Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(now),
	)
}

type claims struct {
	Item string `json:"itm"`
	jwt.RegisteredClaims
}

// Refresh fetches the JWKS now (at start, to fail early on a wrong URL),
// waiting for it at most the refresh timeout. After a failure it fetches
// again only once the backoff has passed, returning the last error before.
func (k *Kit) Refresh(ctx context.Context) error { return k.keys.refresh(ctx) }

// VerifyOffline checks raw with the JWKS alone: signature (EdDSA only, by
// the key its kid names), issuer, audience, expiry, the item, and that it
// was not completed through this Kit. An unknown kid refetches the keys
// (rate-limited), so a key rotation needs no restart.
func (k *Kit) VerifyOffline(ctx context.Context, raw, item string) (Admission, error) {
	if raw == "" {
		return Admission{}, ErrNoToken
	}
	if len(raw) > MaxTokenBytes {
		return Admission{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxTokenBytes)
	}
	var c claims
	var keyErr error
	_, err := k.parser.ParseWithClaims(raw, &c, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		key, err := k.keys.key(ctx, kid)
		keyErr = err
		return key, err
	})
	switch {
	case errors.Is(keyErr, ErrUnavailable):
		return Admission{}, keyErr
	case errors.Is(err, jwt.ErrTokenExpired):
		return Admission{}, ErrExpired
	case err != nil:
		return Admission{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	case len(c.Audience) != 1 || c.ID == "" || c.Item == "" || c.Subject == "":
		return Admission{}, fmt.Errorf("%w: not an admission token", ErrInvalid)
	case item != "" && c.Item != item:
		return Admission{}, ErrOtherItem
	case k.completed(c.ID):
		return Admission{}, ErrEnded
	}
	a := Admission{TokenID: c.ID, ItemID: c.Item, UserID: c.Subject, ExpiresAt: c.ExpiresAt.Time, Raw: raw}
	if c.IssuedAt != nil {
		a.IssuedAt = c.IssuedAt.Time
	}
	return a, nil
}

// Verify checks raw for item offline and, with WithOnlineVerify, online too.
func (k *Kit) Verify(ctx context.Context, raw, item string) (Admission, error) {
	a, err := k.VerifyOffline(ctx, raw, item)
	if err != nil || !k.online {
		return a, err
	}
	ctx, cancel := context.WithTimeout(ctx, k.verifyTimeout)
	defer cancel()
	if _, err := k.VerifyOnline(ctx, raw, item); err != nil && !errors.Is(err, ErrUnavailable) {
		return Admission{}, err
	}
	return a, nil
}

// VerifyOnline asks the api whether raw's admission for item is still live
// (POST /api/v1/admissions/verify): ErrEnded once it was completed or ran
// out, ErrBlocked once the operator blocked its user, ErrUnavailable
// (wrapping an *APIError or the network error) when the api cannot say.
func (k *Kit) VerifyOnline(ctx context.Context, raw, item string) (Admission, error) {
	var out struct {
		ItemID    string `json:"itemId"`
		UserID    string `json:"userId"`
		TokenID   string `json:"tokenId"`
		ExpiresAt string `json:"expiresAt"`
	}
	if err := k.call(ctx, "/api/v1/admissions/verify", raw, item, &out); err != nil {
		return Admission{}, err
	}
	exp, _ := time.Parse(time.RFC3339Nano, out.ExpiresAt)
	return Admission{TokenID: out.TokenID, ItemID: out.ItemID, UserID: out.UserID, ExpiresAt: exp, Raw: raw}, nil
}

// Complete ends raw's admission at the api (POST /api/v1/admissions/complete),
// freeing the place for the next in line: call it when the order is placed.
// A second call answers ErrEnded. This Kit refuses the token from then on,
// even offline.
func (k *Kit) Complete(ctx context.Context, raw, item string) (Admission, error) {
	var out struct {
		ItemID  string `json:"itemId"`
		UserID  string `json:"userId"`
		TokenID string `json:"tokenId"`
	}
	err := k.call(ctx, "/api/v1/admissions/complete", raw, item, &out)
	if err == nil || errors.Is(err, ErrEnded) {
		if a, perr := k.VerifyOffline(ctx, raw, ""); perr == nil {
			k.markCompleted(a.TokenID, a.ExpiresAt)
		}
	}
	if err != nil {
		return Admission{}, err
	}
	return Admission{TokenID: out.TokenID, ItemID: out.ItemID, UserID: out.UserID, Raw: raw}, nil
}

// call POSTs {"token","itemId"} to path and decodes a 200 into out; any
// other answer is mapped to the package's errors.
func (k *Kit) call(ctx context.Context, path, raw, item string, out any) error {
	if raw == "" {
		return ErrNoToken
	}
	body, _ := json.Marshal(map[string]string{"token": raw, "itemId": item}) // strings always marshal
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.api+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("waitroomkit: build request %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	var ae *APIError
	err = k.do(req, out)
	if err == nil || !errors.As(err, &ae) {
		return err
	}
	switch {
	case ae.Status == http.StatusGone:
		return fmt.Errorf("%w: %w", ErrEnded, ae)
	case ae.Status == http.StatusForbidden && ae.Code == "BLOCKED":
		return fmt.Errorf("%w: %w", ErrBlocked, ae)
	case ae.Status == http.StatusForbidden:
		return fmt.Errorf("%w: %w", ErrOtherItem, ae)
	case ae.Status == http.StatusUnauthorized && ae.Code == "TOKEN_EXPIRED":
		return fmt.Errorf("%w: %w", ErrExpired, ae)
	case ae.Status == http.StatusUnauthorized, ae.Status == http.StatusBadRequest:
		return fmt.Errorf("%w: %w", ErrInvalid, ae)
	default:
		return fmt.Errorf("%w: %w", ErrUnavailable, ae)
	}
}

// do sends req and decodes a 2xx answer into out. Any other answer is an
// *APIError with the api's code; a request that got no answer is
// ErrUnavailable.
func (k *Kit) do(req *http.Request, out any) error {
	resp, err := k.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %w", ErrUnavailable, req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("%w: read answer of %s: %w", ErrUnavailable, req.URL.Path, err)
	}
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%w: decode answer of %s: %w", ErrUnavailable, req.URL.Path, err)
		}
		return nil
	}
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(b, &e) // a body that is no error object leaves the code empty
	return &APIError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
}

func (k *Kit) completed(tokenID string) bool {
	k.doneMu.Lock()
	defer k.doneMu.Unlock()
	_, ok := k.done[tokenID]
	return ok
}

// markCompleted remembers a completed token until it expires anyway; the
// set is swept at most once a minute, so it holds only live tokens.
func (k *Kit) markCompleted(tokenID string, exp time.Time) {
	k.doneMu.Lock()
	defer k.doneMu.Unlock()
	now := k.now()
	if now.Sub(k.doneSeen) > time.Minute {
		for id, e := range k.done {
			if now.After(e.Add(time.Minute)) {
				delete(k.done, id)
			}
		}
		k.doneSeen = now
	}
	k.done[tokenID] = exp
}

// WaitURL is the waiting-room page of item, where a refused request is sent.
func (k *Kit) WaitURL(item string) string {
	return k.wait + "/items/" + url.PathEscape(item) + "/wait"
}
