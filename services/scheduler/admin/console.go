package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// ConsolePath is the operator's console: a page, embedded in the binary,
// served by every scheduler replica, behind a login with the admin token.
const ConsolePath = "/admin"

const (
	consoleHeader = "X-WR-Console" // must be "1" on the console's API calls
	sessionCookie = "wr_admin_session"
	// consoleEvery is how often the console's stream sends a snapshot.
	consoleEvery = time.Second
)

var (
	//go:embed console.html
	consoleSrc  string
	consolePage = template.Must(template.New("console").Parse(consoleSrc))
)

// WithLeader lets the console say whether this replica leads (the
// scheduler's Leading).
func (s *Server) WithLeader(leading func() bool) *Server {
	s.leading = leading
	return s
}

func (s *Server) consoleRoutes(r gin.IRouter) {
	r.GET(ConsolePath, s.console)
	r.POST(ConsolePath+"/login", s.login)
	r.POST(ConsolePath+"/logout", s.logout)
	r.GET(ConsolePath+"/events", s.consoleEvents)
}

// maxLoginBytes bounds the sign-in form's body.
const maxLoginBytes = 1 << 10

// session reports whether the request carries a console session that holds
// now on every replica: signed with this token's key, not expired, not
// signed out. An error means Redis could not say; callers refuse then.
func (s *Server) session(c *gin.Context) (bool, error) {
	ck, err := c.Cookie(sessionCookie)
	if err != nil || !s.hasToken || s.sessions == nil {
		return false, nil
	}
	se, ok := s.sessions.parse(ck)
	if !ok {
		return false, nil
	}
	return s.sessions.valid(c.Request.Context(), se, s.now())
}

func (s *Server) setSession(c *gin.Context, value string, maxAge int) {
	secure := s.sessions == nil || s.sessions.secure
	http.SetCookie(c.Writer, &http.Cookie{Name: sessionCookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode})
}

// console serves the console, or the login form without a session.
func (s *Server) console(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	c.Header("Content-Type", "text/html; charset=utf-8")
	host, _ := os.Hostname()
	in, err := s.session(c)
	msg := c.Query("error")
	if err != nil {
		s.log.Warn("console: check session", zap.Error(err))
		msg = "the session cannot be checked right now (Redis); retry shortly"
	}
	data := map[string]any{"LoggedIn": in, "Error": msg, "Replica": host + " " + c.Request.Host,
		"NoToken": !s.hasToken}
	c.Status(http.StatusOK)
	if err := consolePage.Execute(c.Writer, data); err != nil {
		_ = c.Error(err)
	}
}

// login checks the admin token of the form and sets the session cookie.
// Attempts are throttled per client address (the connection's peer: the
// scheduler trusts no X-Forwarded-For) over every replica; when the throttle
// cannot be asked, nobody signs in.
func (s *Server) login(c *gin.Context) {
	if s.sessions == nil || !s.hasToken {
		s.log.Warn("console login refused: no admin token or no session store", zap.String("remote", c.RemoteIP()))
		c.Redirect(http.StatusSeeOther, ConsolePath+"?error=sign-in+is+off+on+this+replica")
		return
	}
	ok, wait, err := s.sessions.allowLogin(c.Request.Context(), c.RemoteIP())
	switch {
	case err != nil:
		s.unavailable(c, "console login", "", err)
		return
	case !ok:
		s.log.Warn("console login throttled", zap.String("remote", c.RemoteIP()))
		c.Header("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
		httpserver.Abort(c, registration.Refuse(http.StatusTooManyRequests, "RATE_LIMITED", "too many sign-in attempts from this address; retry later"))
		return
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxLoginBytes)
	if err := c.Request.ParseForm(); err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			httpserver.Abort(c, registration.Refuse(http.StatusRequestEntityTooLarge, "BODY_TOO_LARGE", "the sign-in form is larger than "+strconv.Itoa(maxLoginBytes)+" bytes"))
			return
		}
		httpserver.Abort(c, registration.Refuse(http.StatusBadRequest, "INVALID_BODY", "reading the sign-in form: "+err.Error()))
		return
	}
	// Both sides hashed first: the comparison takes the same time whatever
	// the guess's length.
	tok := c.Request.PostForm.Get("token")
	sum := sha256.Sum256([]byte(tok))
	if tok == "" || subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) != 1 {
		s.log.Warn("console login refused", zap.String("remote", c.RemoteIP()))
		c.Redirect(http.StatusSeeOther, ConsolePath+"?error=wrong+token")
		return
	}
	_, value, err := s.sessions.issue(s.now())
	if err != nil {
		httpserver.Abort(c, registration.Refuse(http.StatusInternalServerError, "INTERNAL", "could not start a session"))
		return
	}
	s.setSession(c, value, int(s.sessions.ttl.Seconds()))
	s.log.Info("console login", zap.String("remote", c.RemoteIP()), zap.Duration("ttl", s.sessions.ttl))
	c.Redirect(http.StatusSeeOther, ConsolePath)
}

// logout ends the request's session on every replica, then removes the
// cookie. When Redis cannot record the end, the cookie stays and the answer
// says so: a copy of it would still work.
func (s *Server) logout(c *gin.Context) {
	if ck, err := c.Cookie(sessionCookie); err == nil && s.sessions != nil {
		if se, ok := s.sessions.parse(ck); ok {
			if err := s.sessions.revoke(c.Request.Context(), se, s.now()); err != nil {
				s.log.Warn("console: sign out", zap.Error(err))
				c.Header("Retry-After", "1")
				httpserver.Abort(c, registration.Refuse(http.StatusServiceUnavailable, "UNAVAILABLE", "the session could not be ended (Redis); retry shortly"))
				return
			}
		}
	}
	s.setSession(c, "", -1)
	c.Redirect(http.StatusSeeOther, ConsolePath)
}

// ConsoleSnapshot is one event of the console's stream.
type ConsoleSnapshot struct {
	At      int64      `json:"at"` // unix milliseconds
	Leading bool       `json:"leading"`
	Items   []ItemView `json:"items"`
	Error   string     `json:"error,omitempty"`
	Ops     *OpsView   `json:"ops,omitempty"` // DLQ sizes, lag, shard leaders, blocks
}

// consoleEvents streams a snapshot of every item each second (Server-Sent
// Events) while the console is open.
func (s *Server) consoleEvents(c *gin.Context) {
	switch ok, err := s.session(c); {
	case err != nil:
		s.unavailable(c, "console events", "", err)
		return
	case !ok:
		httpserver.Abort(c, registration.Refuse(http.StatusUnauthorized, "UNAUTHORIZED", "sign in to the console first"))
		return
	}
	c.Header("Content-Type", "text/event-stream")
	c.Header("Cache-Control", "no-store")
	c.Status(http.StatusOK)
	t := time.NewTicker(consoleEvery)
	defer t.Stop()
	ctx := c.Request.Context()
	for {
		snap := ConsoleSnapshot{At: s.now().UnixMilli(), Leading: s.leading != nil && s.leading()}
		views, item, err := s.itemViews(ctx)
		if err != nil {
			snap.Error = fmt.Sprintf("read %s: %v", item, err)
		}
		snap.Items = views
		snap.Ops = s.opsView(ctx)
		b, _ := json.Marshal(snap) // plain values always marshal
		if _, err := fmt.Fprintf(c.Writer, "event: snapshot\ndata: %s\n\n", b); err != nil {
			return
		}
		c.Writer.Flush()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Signed out on any replica, expired, or uncheckable: the stream
		// ends and the page goes back to the sign-in form.
		if ok, err := s.session(c); !ok {
			if err != nil {
				s.log.Warn("console events: check session", zap.Error(err))
			}
			_, _ = fmt.Fprint(c.Writer, "event: signedout\ndata: {}\n\n")
			c.Writer.Flush()
			return
		}
	}
}

// addCounters fills the console's fields of v: the stats hash's counters
// and the ETA of the last in line (registration.ETA at position = waiting).
func (s *Server) addCounters(ctx context.Context, v *ItemView, it topics.ItemState, st queue.Stats) error {
	v.OpensAt, v.IdleTimeoutSeconds, v.PowDifficulty = it.OpensAt, it.IdleTimeoutSeconds, it.PowDifficulty
	c, err := s.line.Counters(ctx, it.ItemID)
	if err != nil {
		return err
	}
	v.Abandoned, v.PreQueued = c.Counts["abandoned"], c.PreQueued
	if it.Policy.Steer != nil {
		sv, ok, err := s.line.Steering(ctx, it.ItemID)
		if err != nil {
			return err
		}
		if ok {
			v.Steering = &SteeringView{Applies: sv.Applies, Rate: sv.Rate, HeadLimit: sv.HeadLimit, At: sv.At.UnixMilli(), Last: sv.Last}
		}
	}
	codes := make([]string, 0, len(c.Refused))
	for code, n := range c.Refused {
		v.Refused += n
		codes = append(codes, code)
	}
	slices.Sort(codes)
	for i, code := range codes {
		if i > 0 {
			v.RefusedBy += ", "
		}
		v.RefusedBy += code + " " + strconv.FormatInt(c.Refused[code], 10)
	}
	if st.Waiting > 0 {
		p := registration.Pace{AdmittedLastMinute: st.AdmittedLastMinute, Active: st.Admitted}
		if c.PacedSinceMs > 0 {
			p.Since = time.UnixMilli(c.PacedSinceMs)
		}
		if secs, ok := registration.ETA(st.Waiting, p, it, true, s.now()); ok {
			v.EtaLastSeconds = secs
		}
	}
	return nil
}
