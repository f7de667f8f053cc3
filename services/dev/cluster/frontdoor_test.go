package cluster

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The cluster's Caddy front door answers /metrics 404 itself, as
// deploy/compose's does, and forwards the rest to the replicas.
func TestFrontDoorDoesNotServeMetrics(t *testing.T) {
	var metricsSeen atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(strings.ToLower(r.URL.Path), "metrics") {
			metricsSeen.Add(1)
		}
		_, _ = io.WriteString(w, "upstream")
	}))
	t.Cleanup(up.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := ln.Addr().(*net.TCPAddr).Port - offFront
	ln.Close() // caddy binds it next
	addr := strings.TrimPrefix(up.URL, "http://")
	c := &Cluster{opt: Options{Base: base}, APIs: []*Proc{{Addr: addr}}, Notifiers: []*Proc{{Addr: addr}}}
	dir := t.TempDir()
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(c.caddyfile()), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "caddy", "run", "--config", path, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatalf("caddy (make deps installs it): %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	get := func(p string) (int, string) {
		resp, err := http.Get("http://" + c.addr(offFront) + p)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(20 * time.Second)
	for code, _ := get("/api/v1/items/x"); code != http.StatusOK; code, _ = get("/api/v1/items/x") {
		if time.Now().After(deadline) {
			t.Fatal("the front door does not forward the API")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range []string{"/metrics", "/Metrics", "/metrics/x"} {
		if code, body := get(p); code != http.StatusNotFound || !strings.Contains(body, `"NOT_FOUND"`) {
			t.Errorf("GET %s: %d %s, want 404 NOT_FOUND", p, code, body)
		}
	}
	if n := metricsSeen.Load(); n != 0 {
		t.Errorf("a replica got %d /metrics requests through the door", n)
	}
}
