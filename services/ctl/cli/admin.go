package cli

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
	"time"

	"github.com/spf13/cobra"
)

// adminPrefix is where a scheduler serves the admin API.
const adminPrefix = "/internal/admin/v1"

// adminOpts are the flags of the commands that use the admin API.
type adminOpts struct {
	url     string
	token   string
	timeout time.Duration
}

func (a *app) adminFlags(cmd *cobra.Command, o *adminOpts) {
	f := cmd.Flags()
	f.StringVar(&o.url, "admin-url", a.env.AdminURL, "base URL of a scheduler's admin API (env WR_ADMIN_URL)")
	f.StringVar(&o.token, "admin-token", a.env.AdminToken, "the admin API's bearer token, the scheduler's WR_ADMIN_TOKEN (env WR_ADMIN_TOKEN)")
	f.DurationVar(&o.timeout, "admin-timeout", 10*time.Second, "timeout of one admin API request")
}

func (o *adminOpts) validate() error {
	u, err := url.Parse(o.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--admin-url %q: want http://host:port", o.url)
	}
	if o.timeout <= 0 {
		return usagef("--admin-timeout %s: must be positive", o.timeout)
	}
	return nil
}

// adminClient calls the admin API with the bearer token.
type adminClient struct {
	o  *adminOpts
	hc *http.Client
}

func newAdminClient(o *adminOpts) *adminClient {
	return &adminClient{o: o, hc: &http.Client{Timeout: o.timeout}}
}

// itemView is the admin API's view of an item (services/scheduler/admin.ItemView).
type itemView struct {
	ItemID             string            `json:"itemId"`
	Name               string            `json:"name"`
	Stock              int64             `json:"stock"`
	Enabled            bool              `json:"enabled"`
	Paused             bool              `json:"paused"`
	Policy             policyFields      `json:"policy"`
	Mode               string            `json:"mode"`
	RejectMessage      string            `json:"rejectMessage"`
	Notice             string            `json:"notice"`
	Template           string            `json:"template"`
	Templates          map[string]string `json:"templates"`
	Version            int64             `json:"version"`
	UpdatedAt          int64             `json:"updatedAt"`
	Waiting            int64             `json:"waiting"`
	Admitted           int64             `json:"admitted"`
	Head               int64             `json:"head"`
	Seq                int64             `json:"seq"`
	AdmittedLastMinute int64             `json:"admittedLastMinute"`
	Active             bool              `json:"active"`
	OpensAt            int64             `json:"opensAt"`
	DrawWindowSeconds  int64             `json:"drawWindowSeconds"`
	DrawCommit         string            `json:"drawCommit"`
	DrawRounds         int64             `json:"drawRounds"`
}

type policyFields struct {
	RatePerSecond     float64 `json:"ratePerSecond"`
	MaxActive         int64   `json:"maxActive"`
	SessionTTLSeconds int64   `json:"sessionTTLSeconds"`
	Paused            bool    `json:"paused"`
}

// do sends body (when not nil) as JSON and decodes a 200 answer into out.
func (c *adminClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	u := strings.TrimRight(c.o.url, "/") + adminPrefix + path
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.o.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("%s %s: no answer within --admin-timeout %s", method, u, c.o.timeout)
		}
		return fmt.Errorf("cannot reach the admin API at %s (is a scheduler running? set --admin-url or WR_ADMIN_URL): %w", c.o.url, err)
	}
	defer drain(resp.Body)
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, u, err)
	}
	if resp.StatusCode != http.StatusOK {
		var eb struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(b, &eb)
		if resp.StatusCode == http.StatusUnauthorized {
			return fmt.Errorf("the admin API at %s refused the token (401): set --admin-token or WR_ADMIN_TOKEN to the scheduler's WR_ADMIN_TOKEN", c.o.url)
		}
		if eb.Error.Code == "" {
			return fmt.Errorf("%s %s: HTTP %d: %s", method, u, resp.StatusCode, clip(string(b), 200))
		}
		return fmt.Errorf("%s %s: %d %s: %s", method, u, resp.StatusCode, eb.Error.Code, eb.Error.Message)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, u, err)
	}
	return nil
}
