// Package testenv gives tests the real dependencies waitroom runs on: a
// redis-server of their own on a spare loopback port, and an in-process Kafka
// cluster (kfake) speaking the wire protocol, with the contract's topics.
package testenv

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
)

// RedisServer is a redis-server process owned by a test.
type RedisServer struct {
	Addr string
	t    testing.TB
	cmd  *exec.Cmd
	port int
}

// StartRedis starts a redis-server on a spare loopback port and stops it when
// the test ends. It fails the test when redis-server is not installed (.ci/run
// installs it): integration tests never fall back to a fake.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found on PATH (apt-get install redis-server): %v", err)
	}
	s := &RedisServer{t: t, port: FreePort(t)}
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.port)
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Start (re)starts the server on its port and waits until it answers PING.
func (s *RedisServer) Start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning")
	s.cmd.Stdout, s.cmd.Stderr = nil, nil // its banner is noise; a failure shows as no PING
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := c.Ping(context.Background()).Err(); err == nil {
			return
		} else if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not answer: %v", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop kills the server; its data is gone (no persistence).
func (s *RedisServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Client returns a client of the server, closed when the test ends.
func (s *RedisServer) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 32})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Redis starts a redis-server and returns a client of it.
func Redis(t testing.TB) *redis.Client { return StartRedis(t).Client() }

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Kafka starts an in-process Kafka cluster on loopback with every topic of the
// contract (registrations with partitions partitions) and closes it when the
// test ends. It returns the seed brokers.
func Kafka(t testing.TB, partitions int32, opts ...kfake.Opt) []string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	seeds := c.ListenAddrs()
	if err := EnsureTopics(seeds, partitions); err != nil {
		t.Fatal(err)
	}
	return seeds
}

// EnsureTopics creates the contract's topics on the cluster at seeds.
func EnsureTopics(seeds []string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := topics.DefaultOptions()
	o.RegistrationPartitions = partitions
	st, err := topics.Ensure(ctx, kadm.NewClient(cl), topics.Specs(o), -1)
	if err != nil {
		return fmt.Errorf("ensure topics: %w", err)
	}
	if !topics.Healthy(st) {
		return fmt.Errorf("topics not healthy: %+v", st)
	}
	return nil
}
