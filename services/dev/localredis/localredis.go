// Package localredis gives the dev stack a Redis: a real redis-server when one
// is installed (data kept under the stack's data dir), else an embedded one
// (miniredis) so `make run` works on a machine with only Go.
package localredis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Server is a running local Redis.
type Server struct {
	Addr string
	Kind string // "redis-server" or "embedded (miniredis)"
	stop func()
}

// Start starts redis-server on port with its data in dir, or an embedded
// server when redis-server is not installed.
func Start(ctx context.Context, dir string, port int) (*Server, error) {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if path, err := exec.LookPath("redis-server"); err == nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("redis data dir: %w", err)
		}
		abs, _ := filepath.Abs(dir)
		cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", abs,
			"--appendonly", "yes", "--save", "", "--protected-mode", "no", "--loglevel", "warning")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		stop := func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }
		if err := waitPing(ctx, addr); err != nil {
			stop()
			return nil, err
		}
		return &Server{Addr: addr, Kind: "redis-server " + path, stop: stop}, nil
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(addr); err != nil {
		return nil, fmt.Errorf("start embedded redis: %w", err)
	}
	return &Server{Addr: addr, Kind: "embedded (miniredis, in memory: install redis-server for the real one)", stop: m.Close}, nil
}

// Stop stops the server (redis-server flushes its append-only file first).
func (s *Server) Stop() { s.stop() }

func waitPing(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || errors.Is(err, context.Canceled) {
			return fmt.Errorf("redis on %s did not answer: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
