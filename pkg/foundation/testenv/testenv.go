// Package testenv gives tests the real dependencies waitroom runs on: a
// redis-server of their own on a spare loopback port, and an in-process Kafka
// cluster (kfake) speaking the wire protocol, with the contract's topics.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
)

// RedisServer is a redis-server process owned by a test.
type RedisServer struct {
	Addr string
	// Dir, when set before a (re)start, is where the server keeps dump.rdb:
	// SAVE writes it there and the next Start loads it (a restore).
	Dir string
	// Args are more redis-server arguments of every (re)start (a cluster
	// node's, a replica's).
	Args []string
	// sentinelConf, when set, makes this a Sentinel run from that file.
	sentinelConf string
	// probe, when set, is how launch's readiness check connects (TLS, a user).
	probe *redis.Options
	// scratch is the process's working directory, a temporary one of the
	// test: whatever the server writes without a Dir (a replica's full
	// sync, a SAVE) lands there, never in the test's package folder.
	scratch string
	t       testing.TB
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has exited
	port    int
}

// errExited says redis-server exited before it answered: most often its port
// was taken between FreePort and the bind.
var errExited = errors.New("redis-server exited before answering")

// StartRedis starts a redis-server on a spare loopback port and stops it when
// the test ends. A port taken by another process between picking and binding
// is not a failure: it tries another. It fails the test when redis-server is
// not installed (.ci/run installs it): integration tests never fall back to a
// fake.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found on PATH (apt-get install redis-server): %v", err)
	}
	return startWith(t, func(*RedisServer) {})
}

// startWith starts a redis-server set up by set (before its first start)
// on a spare loopback port, retrying another port when the bind fails, and
// stops it when the test ends.
func startWith(t testing.TB, set func(*RedisServer)) *RedisServer {
	t.Helper()
	s := &RedisServer{t: t, scratch: t.TempDir()} // before Stop's cleanup, so removed after it
	set(s)
	t.Cleanup(s.Stop)
	var err error
	for range 10 {
		s.port = FreePort(t)
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.port)
		if err = s.launch(); !errors.Is(err, errExited) {
			break
		}
	}
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	return s
}

// Start restarts the server on its port (after Stop) and waits until it
// answers PING. Another process may have taken the port meanwhile; it retries
// for a few seconds before failing the test.
func (s *RedisServer) Start() {
	s.t.Helper()
	var err error
	for range 30 {
		if err = s.launch(); !errors.Is(err, errExited) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("restart redis-server on %s: %v", s.Addr, err)
	}
}

// launch starts redis-server on s.port and waits until the process it started
// (checked by pid, so not another server that holds the port) answers.
func (s *RedisServer) launch() error {
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning"}
	if s.probe != nil && s.probe.TLSConfig != nil { // TLS only: the plain port is closed
		args[0], args[1] = "--tls-port", strconv.Itoa(s.port)
		args = append(args, "--port", "0")
	}
	if s.sentinelConf != "" { // a config file comes first; Sentinel rewrites it
		args = []string{s.sentinelConf, "--sentinel", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
			"--protected-mode", "no", "--loglevel", "warning"}
	}
	if s.Dir != "" && s.sentinelConf == "" {
		args = append(args, "--dir", s.Dir, "--dbfilename", "dump.rdb")
	}
	args = append(args, s.Args...)
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = s.scratch
	cmd.Stdout, cmd.Stderr = nil, nil // its banner is noise; a failure shows as an exit or no PING
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	po := redis.Options{}
	if s.probe != nil {
		po = *s.probe // TLS, a user: how this server must be talked to
	}
	po.Addr, po.MaxRetries = s.Addr, -1
	c := redis.NewClient(&po)
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			s.cmd, s.done = nil, nil
			return fmt.Errorf("port %d: %w", s.port, errExited)
		default:
		}
		pid, err := serverPID(c)
		switch {
		case err == nil && pid == cmd.Process.Pid:
			return nil
		case err == nil:
			err = fmt.Errorf("another redis-server (pid %d) answers on %s", pid, s.Addr)
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("redis-server (pid %d) on %s did not answer: %w", cmd.Process.Pid, s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serverPID asks the server on c for its process id.
func serverPID(c *redis.Client) (int, error) {
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

// Stop kills the server; its data is gone (no persistence).
func (s *RedisServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd, s.done = nil, nil
}

// Client returns a client of the server, closed when the test ends.
func (s *RedisServer) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 32})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Fill makes the server's memory full, as the nemesis's redis-oom does:
// maxmemory below the memory in use, policy noeviction, so every command
// that may grow memory is refused with OOM until the returned func (also
// run when the test ends) lifts it.
func (s *RedisServer) Fill() (lift func()) {
	ctx := context.Background()
	c := s.Client()
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		s.t.Fatalf("testenv: set maxmemory-policy: %v", err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil { // below any server's memory in use
		s.t.Fatalf("testenv: set maxmemory: %v", err)
	}
	lift = func() { c.ConfigSet(context.Background(), "maxmemory", "0") }
	s.t.Cleanup(lift)
	return lift
}

// PID is the server's process id (0 when stopped).
func (s *RedisServer) PID() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Redis returns a client of a Redis of the test's own: a redis-server, or,
// with WR_TEST_REDIS=cluster, a 3-master Redis Cluster (RedisBackend).
func Redis(t testing.TB) redis.UniversalClient {
	_, rdb := RedisBackend(t)
	return rdb
}

// FreePort returns a loopback TCP port that was free a moment ago. Another
// process may take it before the caller binds it: a server that can listen on
// port 0 itself should; StartRedis retries on another port when the bind fails.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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

// EnsureTopics creates the contract's topics (topics.Specs, registrations
// with partitions partitions) on the cluster at seeds; a topic already there
// is left as it is. A test cluster starts empty, so this is creation only:
// comparing and repairing a live cluster is topicadmin's (pkg/kafka), above
// this layer.
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
	adm := kadm.NewClient(cl)
	for _, sp := range topics.Specs(o) {
		configs := make(map[string]*string, len(sp.Configs))
		for k, v := range sp.Configs {
			configs[k] = &v
		}
		resp, err := adm.CreateTopic(ctx, sp.Partitions, -1, configs, sp.Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", sp.Name, err)
		}
	}
	return nil
}
