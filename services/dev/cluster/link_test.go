package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// echoServer answers every line with the line, on a free loopback port.
func echoServer(t *testing.T) net.Listener {
	t.Helper()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go serveEcho(echo)
	return echo
}

func serveEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				c.Write([]byte(line))
			}
		}()
	}
}

func newProxy(t *testing.T, target string) *Link {
	t.Helper()
	p, err := NewProxy("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads the echo within wait.
func roundTrip(c net.Conn, msg string, wait time.Duration) error {
	c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && got != msg+"\n" {
		return errors.New("echo " + got)
	}
	return err
}

// The link the chaos suite cuts: open connections are reset, new ones are
// reset until Heal, and then traffic flows again.
func TestLinkCutAndHeal(t *testing.T) {
	p := newProxy(t, echoServer(t).Addr().String())
	c := dial(t, p.Addr())
	if err := roundTrip(c, "ping", 2*time.Second); err != nil {
		t.Fatalf("through the link: %v", err)
	}
	p.Cut()
	if err := roundTrip(c, "ping", 2*time.Second); err == nil {
		t.Fatal("an open connection still carried traffic after Cut")
	}
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		if err := roundTrip(c2, "ping", 2*time.Second); err == nil {
			t.Fatal("a new connection carried traffic while cut")
		}
		c2.Close()
	}
	p.Heal()
	if err := roundTrip(dial(t, p.Addr()), "ping", 2*time.Second); err != nil {
		t.Fatalf("after Heal: %v", err)
	}
}

// A held link answers nothing, on open connections and on new ones (they
// connect), and delivers what it held once healed: the late write a paused
// leader's peer receives.
func TestLinkHoldDeliversLate(t *testing.T) {
	p := newProxy(t, echoServer(t).Addr().String())
	c := dial(t, p.Addr())
	if err := roundTrip(c, "before", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Hold()
	c2 := dial(t, p.Addr()) // accepted while held
	for _, cn := range []net.Conn{c, c2} {
		err := roundTrip(cn, "held", 300*time.Millisecond)
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			t.Fatalf("a held link answered: %v", err)
		}
	}
	p.Heal()
	for _, cn := range []net.Conn{c, c2} {
		cn.SetDeadline(time.Now().Add(2 * time.Second))
		got, err := bufio.NewReader(cn).ReadString('\n')
		if err != nil || got != "held\n" {
			t.Fatalf("after Heal the held write was not delivered: %q %v", got, err)
		}
	}
}

// Held, then reset (toxiproxy's timeout toxic): what was held is dropped and
// the client sees a reset, not an answer; new connections work again.
func TestLinkHeldThenResetDropsWhatItHeld(t *testing.T) {
	p := newProxy(t, echoServer(t).Addr().String())
	c := dial(t, p.Addr())
	p.Hold()
	c.Write([]byte("lost\n"))
	time.Sleep(50 * time.Millisecond)
	p.Reset()
	p.Heal()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	_, err := bufio.NewReader(c).ReadString('\n')
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after Reset: %v, want a connection reset", err)
	}
	if err := roundTrip(dial(t, p.Addr()), "again", 2*time.Second); err != nil {
		t.Fatalf("a new connection after Reset: %v", err)
	}
}

// Latency delays each way; the rate squeezes the bandwidth. Both are lower
// bounds the link must not beat (no upper bound: the machine is shared).
func TestLinkLatencyAndRate(t *testing.T) {
	p := newProxy(t, echoServer(t).Addr().String())
	c := dial(t, p.Addr())
	p.Set(Toxics{Latency: 150 * time.Millisecond, Jitter: 50 * time.Millisecond})
	start := time.Now()
	if err := roundTrip(c, "slow", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("round trip in %s through 150±50 ms each way", d)
	}
	p.Set(Toxics{Rate: 4000})
	msg := strings.Repeat("x", 1999)
	start = time.Now()
	if err := roundTrip(c, msg, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 800*time.Millisecond {
		t.Fatalf("2 kB each way at 4 kB/s in %s", d)
	}
	p.Heal()
	if err := roundTrip(c, "healed", 2*time.Second); err != nil {
		t.Fatal(err)
	}
}

// In a namespace, a link listens on the very address a server uses outside
// (as the cluster does with the brokers' and Redis's addresses): a client
// inside reaches the server only through the link, and a Cut cuts it off.
func TestLinkInANamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	echo := echoServer(t)
	ns, err := NewNetns(context.Background(), "wrtest-link")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	ln, err := ns.Listen(echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	l := NewLink("test", ln, func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", echo.Addr().String())
	})
	t.Cleanup(func() { l.Close() })
	c, err := ns.Dial(context.Background(), echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, "inside", 2*time.Second); err != nil {
		t.Fatalf("from inside through the link: %v", err)
	}
	l.Cut()
	if c2, err := ns.Dial(context.Background(), echo.Addr().String()); err == nil {
		if err := roundTrip(c2, "cut", time.Second); err == nil {
			t.Fatal("reached the server outside while the link was cut")
		}
		c2.Close()
	}
}

// recordingEcho echoes every line and also hands it to got: the test sees
// what reached the server, whatever comes back.
func recordingEcho(t *testing.T) (net.Listener, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					got <- strings.TrimSpace(line)
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln, got
}

func received(got <-chan string, wait time.Duration) (string, bool) {
	select {
	case s := <-got:
		return s, true
	case <-time.After(wait):
		return "", false
	}
}

// An asymmetric partition, answers held: the request reaches the server (it
// acts on it) and the client hears nothing until Heal, then the late answer.
func TestLinkHoldDownDeliversTheRequestNotTheAnswer(t *testing.T) {
	srv, got := recordingEcho(t)
	p := newProxy(t, srv.Addr().String())
	c := dial(t, p.Addr())
	if err := roundTrip(c, "before", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	<-got
	p.HoldOneWay(Down)
	err := roundTrip(c, "write", 300*time.Millisecond)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("an answer came back through a link holding answers: %v", err)
	}
	if s, ok := received(got, 2*time.Second); !ok || s != "write" {
		t.Fatalf("the server did not get the request (%q, %v)", s, ok)
	}
	p.Heal()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "write\n" {
		t.Fatalf("after Heal the held answer was not delivered: %q %v", line, err)
	}
}

// Requests held: the server hears nothing until Heal; a new connection
// waits too (a handshake cannot complete one way).
func TestLinkHoldUpHoldsRequestsAndNewConnections(t *testing.T) {
	srv, got := recordingEcho(t)
	p := newProxy(t, srv.Addr().String())
	c := dial(t, p.Addr())
	if err := roundTrip(c, "before", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	<-got
	p.HoldOneWay(Up)
	c2 := dial(t, p.Addr())
	for _, cn := range []net.Conn{c, c2} {
		cn.Write([]byte("held\n"))
	}
	if s, ok := received(got, 300*time.Millisecond); ok {
		t.Fatalf("the server got %q through a link holding requests", s)
	}
	p.Heal()
	for range 2 {
		if s, ok := received(got, 2*time.Second); !ok || s != "held" {
			t.Fatalf("after Heal the held request did not arrive (%q, %v)", s, ok)
		}
	}
}

// Packet loss, as TCP shows it: some chunks wait a retransmission timeout
// (200 ms at least), nothing is lost, reordered or changed.
func TestLinkLossDelaysButNeverLosesOrReorders(t *testing.T) {
	p := newProxy(t, echoServer(t).Addr().String())
	c := dial(t, p.Addr())
	p.Set(Toxics{Loss: 0.3})
	slow := 0
	r := bufio.NewReader(c)
	for i := range 30 {
		msg := fmt.Sprintf("m%02d", i)
		start := time.Now()
		c.SetDeadline(time.Now().Add(15 * time.Second))
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil || line != msg+"\n" {
			t.Fatalf("round trip %d: %q %v, want %q", i, line, err, msg)
		}
		if time.Since(start) >= 200*time.Millisecond {
			slow++
		}
	}
	// 60 passages at 30%: all lucky once in 2×10⁹ runs.
	if slow == 0 {
		t.Fatal("30 round trips at 30% loss and none waited a retransmission")
	}
	t.Logf("%d of 30 round trips waited a retransmission", slow)
}
