package composecheck

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The compose Caddyfile, run by caddy on loopback with test servers in place
// of the replicas: /metrics (any case, with a trailing part) is answered 404
// by the door and never reaches a service, while the API and the event
// streams are forwarded.
func TestFrontDoorDoesNotServeMetrics(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			mu.Lock()
			seen = append(seen, r.URL.Path)
			mu.Unlock()
		}
		_, _ = io.WriteString(w, "upstream "+r.URL.Path)
	}))
	t.Cleanup(upstream.Close)
	up := strings.TrimPrefix(upstream.URL, "http://")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close()) // caddy binds it next

	file := strings.NewReplacer(
		":8000 {", "http://127.0.0.1:"+strconv.Itoa(port)+" {\n\tbind 127.0.0.1",
		"notifier-1:8090 notifier-2:8090", up,
		"api-1:8080 api-2:8080", up,
	).Replace(readFile(t, caddyfile))
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	require.NoError(t, os.WriteFile(path, []byte(file), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "caddy", "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	require.NoError(t, cmd.Start(), "make deps installs caddy")
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})

	base := "http://127.0.0.1:" + strconv.Itoa(port)
	get := func(p string) (int, string, error) {
		resp, err := http.Get(base + p)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	require.Eventually(t, func() bool {
		code, _, err := get("/api/v1/items/x/registrations")
		return err == nil && code == http.StatusOK
	}, 20*time.Second, 50*time.Millisecond, "the front door forwards the API")
	code, body, err := get("/api/v1/items/x/registrations/tok/events")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "upstream /api/v1/items/x/registrations/tok/events", body, "and the event streams")

	for _, p := range []string{"/metrics", "/METRICS", "/metrics/", "/metrics?format=text", "//metrics", "/api/../metrics"} {
		code, body, err := get(p)
		require.NoError(t, err, p)
		assert.Equal(t, http.StatusNotFound, code, p)
		assert.JSONEq(t, `{"error":{"code":"NOT_FOUND","message":"no route /metrics"}}`, body, p)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, seen, "/api/v1/items/x/registrations/tok/events", "the upstream sees what the door forwards")
	for _, p := range seen {
		assert.NotContains(t, strings.ToLower(p), "metrics", "a service got %s", p)
	}
}
