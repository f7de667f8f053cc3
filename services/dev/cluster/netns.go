package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// Netns is a named Linux network namespace (`ip netns add`): a process run
// in it has a loopback of its own, so 127.0.0.1:port inside is whatever the
// suite listens on there. The chaos suite runs each service in one and
// listens, inside, on the Kafka brokers' and Redis's own addresses: every
// connection the service makes, to a seed broker, to a broker advertised in
// Kafka's metadata or to Redis, goes through a Link the suite controls,
// without any dial hook in the service. It needs root (CAP_SYS_ADMIN).
type Netns struct {
	Name string
}

// NewNetns creates the namespace name (removing a stale one of that name
// first) and brings its loopback up.
func NewNetns(ctx context.Context, name string) (*Netns, error) {
	_ = exec.CommandContext(ctx, "ip", "netns", "del", name).Run()
	for _, args := range [][]string{{"netns", "add", name}, {"-n", name, "link", "set", "lo", "up"}} {
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ip %v: %w: %s", args, err, out)
		}
	}
	return &Netns{Name: name}, nil
}

// Close removes the namespace (a process still in it keeps it alive until it ends).
func (n *Netns) Close() error {
	if out, err := exec.Command("ip", "netns", "del", n.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %w: %s", n.Name, err, out)
	}
	return nil
}

// Command is the argv that runs bin with args inside the namespace.
func (n *Netns) Command(bin string, args ...string) (string, []string) {
	return "ip", append([]string{"netns", "exec", n.Name, bin}, args...)
}

// Listen listens on addr inside the namespace.
func (n *Netns) Listen(addr string) (net.Listener, error) {
	var ln net.Listener
	err := n.do(func() (err error) { ln, err = net.Listen("tcp", addr); return err })
	return ln, err
}

// Dial connects to addr from inside the namespace.
func (n *Netns) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.do(func() (err error) { c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr); return err })
	return c, err
}

// do runs f on an OS thread switched into the namespace. A socket belongs to
// the namespace it was created in, whatever thread uses it later; the socket
// is created in f's goroutine, on this locked thread. The goroutine is its
// own: should the way back fail, it ends still locked, and the runtime ends
// the thread with it instead of reusing a thread in the wrong namespace.
func (n *Netns) do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open this thread's netns: %w", err)
			return
		}
		defer self.Close()
		target, err := os.Open("/var/run/netns/" + n.Name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open netns %s: %w", n.Name, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", n.Name, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("leave netns %s: %w", n.Name, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// ProcNet is a service's network in an isolated cluster: its namespace and
// the links that are its only ways out and in.
type ProcNet struct {
	NS    *Netns
	Kafka []*Link // one per broker, in the order of Cluster.Brokers
	Redis *Link   // to the (first) primary
	// RedisMore are the links to the replica and the Sentinels (Sentinel
	// mode), in the order of Cluster.RedisAddrs after the primary.
	RedisMore []*Link
	In        *Link // from the host (the front door, the suite) to its HTTP listener
}

// RedisLinks lists every link of the service to Redis: the primary's, and
// in Sentinel mode the replica's and the Sentinels'. Cutting them all cuts
// the service off from Redis whichever server is the primary.
func (n *ProcNet) RedisLinks() []*Link {
	if n.Redis == nil {
		return nil
	}
	return append([]*Link{n.Redis}, n.RedisMore...)
}

// Links lists every link of the service.
func (n *ProcNet) Links() []*Link {
	ls := append(append([]*Link{}, n.Kafka...), n.RedisLinks()...)
	if n.In != nil {
		ls = append(ls, n.In)
	}
	return ls
}

func (n *ProcNet) close() error {
	var errs []error
	for _, l := range n.Links() {
		_ = l.Close()
	}
	if n.NS != nil {
		errs = append(errs, n.NS.Close())
	}
	return errors.Join(errs...)
}

// isolate creates p's namespace and its links: inside, on each broker's and
// Redis's own address, a link to the real one; outside, on p's HTTP address,
// a link to p's listener inside.
func (c *Cluster) isolate(ctx context.Context, p *Proc) error {
	ns, err := NewNetns(ctx, p.Net.NS.Name)
	if err != nil {
		return fmt.Errorf("isolate %s: %w", p.Name, err)
	}
	p.Net.NS = ns
	out := func(to string) (*Link, error) {
		ln, err := ns.Listen(to)
		if err != nil {
			return nil, fmt.Errorf("isolate %s: listen on %s inside: %w", p.Name, to, err)
		}
		return NewLink(p.Name+"→"+to, ln, func(ctx context.Context) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", to)
		}), nil
	}
	for _, b := range c.Brokers {
		l, err := out(b)
		if err != nil {
			return err
		}
		p.Net.Kafka = append(p.Net.Kafka, l)
	}
	if p.Net.Redis, err = out(c.RedisAddr); err != nil {
		return err
	}
	for _, a := range c.RedisAddrs[1:] {
		l, err := out(a)
		if err != nil {
			return err
		}
		p.Net.RedisMore = append(p.Net.RedisMore, l)
	}
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		return fmt.Errorf("isolate %s: listen on %s outside: %w", p.Name, p.Addr, err)
	}
	p.Net.In = NewLink("→"+p.Name, ln, func(ctx context.Context) (net.Conn, error) { return ns.Dial(ctx, p.Addr) })
	return nil
}
