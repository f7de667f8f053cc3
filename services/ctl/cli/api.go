package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	reg "github.com/waitroom/waitroom/pkg/domain/registration"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// api is a client of the registration API, tuned for benchmarking over
// loopback: keep-alive connections, one idle connection kept per worker.
type api struct {
	base string
	hc   *http.Client
}

func newAPI(base string, conns int, timeout time.Duration) *api {
	tr := &http.Transport{
		Proxy:               nil, // a bench measures the stack, never a proxy
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &api{base: strings.TrimRight(base, "/"), hc: &http.Client{Transport: tr, Timeout: timeout}}
}

func (c *api) close() { c.hc.CloseIdleConnections() }

// registerAnswer is the part of the 202 answer a bench needs.
type registerAnswer struct {
	Status string `json:"status"`
	Token  string `json:"token"`
}

// statusAnswer is the part of the status answer a bench checks.
type statusAnswer struct {
	Status   string `json:"status"`
	Position int64  `json:"position"`
}

// Statuses the benches look for.
const (
	statusPending  = reg.StatusPending
	statusWaiting  = reg.StatusWaiting
	statusAdmitted = reg.StatusAdmitted
)

// register POSTs a registration and returns the HTTP status code and, on 202,
// the queue token. Any body is read to the end so the connection is reused.
func (c *api) register(ctx context.Context, item, user string) (int, string, error) {
	body, _ := json.Marshal(struct {
		UserID string `json:"userId"`
	}{user})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/api/v1/items/"+url.PathEscape(item)+"/registrations", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer drain(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return resp.StatusCode, "", nil
	}
	var a registerAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return resp.StatusCode, "", fmt.Errorf("decode 202 answer: %w", err)
	}
	if a.Token == "" {
		return resp.StatusCode, "", errors.New("202 answer without a token")
	}
	return resp.StatusCode, a.Token, nil
}

// status GETs where a registration stands; the answer is decoded on 200 only.
func (c *api) status(ctx context.Context, item, token string) (int, statusAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/items/"+url.PathEscape(item)+"/registrations/"+url.PathEscape(token), nil)
	if err != nil {
		return 0, statusAnswer{}, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, statusAnswer{}, err
	}
	defer drain(resp.Body)
	var a statusAnswer
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, a, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return resp.StatusCode, a, fmt.Errorf("decode status answer: %w", err)
	}
	return resp.StatusCode, a, nil
}

func drain(b io.ReadCloser) {
	_, _ = io.Copy(io.Discard, b)
	_ = b.Close()
}

// errorKey names a failed request for the errors-by-status table: the HTTP
// status code, or what went wrong below HTTP.
func errorKey(code int, err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return strconv.Itoa(code)
	case code != 0:
		return strconv.Itoa(code) + "-bad-body"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	default:
		return "transport"
	}
}

// validURL checks a --url flag: an absolute http(s) URL of a host.
func validURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return usagef("--url %q: %v", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--url %q: want http://host:port", s)
	}
	return nil
}
