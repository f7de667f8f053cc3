package testenv

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/foundation/redisclient"
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

// The cluster serves every slot from three masters: keys of different hash
// tags land on different nodes, and a script over one tag's keys runs.
func TestRedisClusterServesEverySlot(t *testing.T) {
	c := StartRedisCluster(t, 3)
	cl := c.Client()
	ctx := t.Context()
	nodes := map[string]bool{}
	for i := range 30 {
		key := "wr:{item" + string(rune('a'+i%26)) + string(rune('0'+i/26)) + "}:seq"
		if err := cl.Incr(ctx, key).Err(); err != nil {
			t.Fatalf("INCR %s: %v", key, err)
		}
		slot, err := cl.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range cl.ClusterSlots(ctx).Val() {
			if int64(s.Start) <= slot && slot <= int64(s.End) {
				nodes[s.Nodes[0].Addr] = true
			}
		}
	}
	if len(nodes) != 3 {
		t.Fatalf("30 hash tags landed on %d masters, want 3: %v", len(nodes), nodes)
	}
	if err := cl.Eval(ctx, "redis.call('SET', KEYS[1], 1) return redis.call('INCR', KEYS[2])", []string{"wr:{x}:a", "wr:{x}:b"}).Err(); err != nil {
		t.Fatalf("a script over one tag: %v", err)
	}
	if err := cl.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"wr:{x}:a", "wr:{y}:a"}).Err(); err == nil {
		t.Fatal("a script over two tags ran: the cluster is not checking slots")
	}
}

// Killing the primary (SIGKILL, its PID) makes the Sentinel promote the
// replica, and a failover client writes there.
func TestSentinelFailsOver(t *testing.T) {
	s := StartSentinel(t)
	c := s.Client()
	ctx := t.Context()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Primary.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		addr, err := s.PrimaryAddr(ctx)
		if err == nil && addr == s.Replica.Addr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover to %s: primary %s, %v", s.Replica.Addr, addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		err := c.Set(ctx, "k2", "v2", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("write after the failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v := c.Get(ctx, "k").Val(); v != "v" {
		t.Fatalf("the key written before the failover reads %q", v)
	}
}

// The client config.Redis builds reaches a TLS-only Redis as an ACL user;
// a wrong password and an untrusted certificate are refused.
func TestSecureRedisNeedsTheCAAndThePassword(t *testing.T) {
	cfg, _ := SecureRedis(t)
	ctx := t.Context()
	c, err := redisclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if who, err := c.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != RedisUser {
		t.Fatalf("ACL WHOAMI over TLS: %q, %v", who, err)
	}
	bad := cfg
	bad.Password = "wrong-password"
	c2, err := redisclient.New(bad)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("a wrong password: got %v, want WRONGPASS", err)
	}
	noCA := cfg
	noCA.TLSCAFile = ""
	c3, err := redisclient.New(noCA)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := c3.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: got %v, want a certificate error", err)
	}
}
