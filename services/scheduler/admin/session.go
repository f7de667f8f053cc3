package admin

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// ConsoleOptions set the console's sessions and sign-in.
type ConsoleOptions struct {
	// SecureCookie marks the session cookie Secure: browsers send it over
	// https only. Turn it off only for a console served on plain http.
	SecureCookie bool
	// SessionTTL is how long a sign-in lasts (default DefaultSessionTTL).
	SessionTTL time.Duration
	// LoginsPerMinute bounds sign-in attempts per client address, over
	// every replica (default DefaultLoginsPerMinute).
	LoginsPerMinute int
}

const (
	// DefaultSessionTTL is ConsoleOptions.SessionTTL when not set.
	DefaultSessionTTL = 8 * time.Hour
	// DefaultLoginsPerMinute is ConsoleOptions.LoginsPerMinute when not set.
	DefaultLoginsPerMinute = 5

	sessionIDLen  = 16
	sessionLen    = sessionIDLen + 8 // id, then the expiry in unix milliseconds
	sessionLabel  = "waitroom-console-session-v2"
	revokedPrefix = "wr:console:revoked:"
	loginPrefix   = "wr:console:login:"
	sessionCall   = 500 * time.Millisecond // per Redis call of a session check
	revokeSlack   = time.Minute
)

// ErrNoConsole says the server has no session store (WithConsole not called):
// the console refuses every sign-in.
var ErrNoConsole = errors.New("console sessions are not configured")

// sessions are the console's sign-ins: a cookie holds a random id and its
// expiry, signed with a key derived from the admin token, so every replica
// checks it without shared state and a new token ends every session. Signing
// out records the id in Redis until its expiry (the revocation list stays as
// small as the sessions that could still be used).
type sessions struct {
	rdb    redis.UniversalClient
	key    []byte
	ttl    time.Duration
	secure bool
	lim    *redis_rate.Limiter
	limit  redis_rate.Limit
}

// session is one sign-in, as the cookie carries it.
type session struct {
	id      [sessionIDLen]byte
	expires time.Time
}

func (ss session) revokedKey() string { return revokedPrefix + hex.EncodeToString(ss.id[:]) }

// sessionKey derives the cookies' signing key from the admin token's hash,
// so the cookie never holds (or reveals) the token.
func sessionKey(tokenSum [sha256.Size]byte) []byte {
	m := hmac.New(sha256.New, tokenSum[:])
	m.Write([]byte(sessionLabel + " key"))
	return m.Sum(nil)
}

// WithConsole turns on the console's sign-in, its sessions kept over rdb
// (the revocation list and the sign-in throttle, shared by every replica).
// Without it the console refuses every sign-in.
func (s *Server) WithConsole(rdb redis.UniversalClient, o ConsoleOptions) *Server {
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.LoginsPerMinute <= 0 {
		o.LoginsPerMinute = DefaultLoginsPerMinute
	}
	s.sessions = &sessions{rdb: rdb, key: sessionKey(s.tokenSum), ttl: o.SessionTTL, secure: o.SecureCookie,
		lim: redis_rate.NewLimiter(rdb), limit: redis_rate.PerMinute(o.LoginsPerMinute)}
	return s
}

// WithClock sets the server's clock (session expiry, timestamps); tests use it.
func (s *Server) WithClock(now func() time.Time) *Server {
	s.now = now
	return s
}

// mac signs a cookie's payload.
func (ss *sessions) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, ss.key)
	m.Write([]byte(sessionLabel))
	m.Write(payload)
	return m.Sum(nil)
}

// issue makes a new session that ends ttl after now, and its cookie value.
func (ss *sessions) issue(now time.Time) (session, string, error) {
	var se session
	if _, err := rand.Read(se.id[:]); err != nil {
		return se, "", fmt.Errorf("session id: %w", err)
	}
	se.expires = now.Add(ss.ttl).Truncate(time.Millisecond)
	payload := make([]byte, sessionLen)
	copy(payload, se.id[:])
	binary.BigEndian.PutUint64(payload[sessionIDLen:], uint64(se.expires.UnixMilli()))
	enc := base64.RawURLEncoding
	return se, enc.EncodeToString(payload) + "." + enc.EncodeToString(ss.mac(payload)), nil
}

// parse returns the session of a cookie value when its signature holds
// (whatever its expiry).
func (ss *sessions) parse(v string) (session, bool) {
	var se session
	p, m, ok := strings.Cut(v, ".")
	if !ok {
		return se, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil || len(payload) != sessionLen {
		return se, false
	}
	sig, err := base64.RawURLEncoding.DecodeString(m)
	if err != nil || !hmac.Equal(sig, ss.mac(payload)) {
		return se, false
	}
	copy(se.id[:], payload)
	se.expires = time.UnixMilli(int64(binary.BigEndian.Uint64(payload[sessionIDLen:])))
	return se, true
}

// valid reports whether a signed session may be used at now: not expired and
// not signed out. An error (Redis cannot answer) is no answer: callers refuse.
func (ss *sessions) valid(ctx context.Context, se session, now time.Time) (bool, error) {
	if !now.Before(se.expires) {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, sessionCall)
	defer cancel()
	n, err := ss.rdb.Exists(ctx, se.revokedKey()).Result()
	if err != nil {
		return false, fmt.Errorf("check console session: %w", err)
	}
	return n == 0, nil
}

// revoke ends se on every replica: its id is listed until its expiry, plus
// revokeSlack for replicas whose clocks lag this one's.
func (ss *sessions) revoke(ctx context.Context, se session, now time.Time) error {
	if !now.Before(se.expires) {
		return nil // ended already
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := ss.rdb.Set(ctx, se.revokedKey(), 1, se.expires.Sub(now)+revokeSlack).Err(); err != nil {
		return fmt.Errorf("revoke console session: %w", err)
	}
	return nil
}

// allowLogin takes one sign-in attempt from addr's budget; when none is left
// it returns false and how long until one is.
func (ss *sessions) allowLogin(ctx context.Context, addr string) (bool, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, sessionCall)
	defer cancel()
	res, err := ss.lim.Allow(ctx, loginPrefix+addr, ss.limit)
	if err != nil {
		return false, 0, fmt.Errorf("console sign-in throttle: %w", err)
	}
	return res.Allowed > 0, res.RetryAfter, nil
}
