package testenv

import (
	"errors"
	"testing"
)

// A port another redis-server holds is not taken for ours: the second server
// exits on the bind, and launch says so (StartRedis then tries another port)
// instead of talking to the first one.
func TestLaunchOnATakenPortFails(t *testing.T) {
	first := StartRedis(t)
	second := &RedisServer{t: t, port: first.port, Addr: first.Addr}
	t.Cleanup(second.Stop)
	err := second.launch()
	if !errors.Is(err, errExited) {
		t.Fatalf("launch on a taken port: got %v, want %v", err, errExited)
	}
	if err := first.Client().Ping(t.Context()).Err(); err != nil {
		t.Fatalf("the first server stopped answering: %v", err)
	}
}

// Stop and Start bring the server back on the same address.
func TestRestartKeepsTheAddress(t *testing.T) {
	s := StartRedis(t)
	c := s.Client()
	s.Stop()
	if c.Ping(t.Context()).Err() == nil {
		t.Fatal("a stopped server answered")
	}
	s.Start()
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("restarted server: %v", err)
	}
}
