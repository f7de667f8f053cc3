package admin

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/queue"
	"github.com/waitroom/waitroom/pkg/registration"
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

// sessionValue is what the session cookie holds: derived from the admin
// token, so every replica accepts it, a changed token ends every session,
// and the cookie never holds the token itself.
func (s *Server) sessionValue() string {
	m := hmac.New(sha256.New, s.tokenSum[:])
	m.Write([]byte("waitroom-console-session-v1"))
	return hex.EncodeToString(m.Sum(nil))
}

func (s *Server) session(c *gin.Context) bool {
	ck, err := c.Cookie(sessionCookie)
	if err != nil || !s.hasToken {
		return false
	}
	want := s.sessionValue()
	return subtle.ConstantTimeCompare([]byte(ck), []byte(want)) == 1
}

func (s *Server) setSession(c *gin.Context, value string, maxAge int) {
	http.SetCookie(c.Writer, &http.Cookie{Name: sessionCookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: c.Request.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// console serves the console, or the login form without a session.
func (s *Server) console(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	c.Header("Content-Type", "text/html; charset=utf-8")
	host, _ := os.Hostname()
	data := map[string]any{"LoggedIn": s.session(c), "Error": c.Query("error"), "Replica": host + " " + c.Request.Host,
		"NoToken": !s.hasToken}
	c.Status(http.StatusOK)
	if err := consolePage.Execute(c.Writer, data); err != nil {
		_ = c.Error(err)
	}
}

// login checks the admin token of the form and sets the session cookie.
func (s *Server) login(c *gin.Context) {
	tok := c.PostForm("token")
	sum := sha256.Sum256([]byte(tok))
	if !s.hasToken || tok == "" || subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) != 1 {
		s.log.Warn("console login refused", zap.String("remote", c.ClientIP()))
		c.Redirect(http.StatusSeeOther, ConsolePath+"?error=wrong+token")
		return
	}
	s.setSession(c, s.sessionValue(), int((12 * time.Hour).Seconds()))
	s.log.Info("console login", zap.String("remote", c.ClientIP()))
	c.Redirect(http.StatusSeeOther, ConsolePath)
}

func (s *Server) logout(c *gin.Context) {
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
	if !s.session(c) {
		c.AbortWithStatus(http.StatusUnauthorized)
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
