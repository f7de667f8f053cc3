package cluster

import (
	"strings"
	"testing"
)

// With Options.Pprof every service gets a pprof port of its own, 100 above
// its HTTP port (no two alike, none on a port of the layout); without it none.
func TestPprofGivesEveryServiceItsOwnPort(t *testing.T) {
	for _, on := range []bool{true, false} {
		c := &Cluster{opt: Options{Base: 19900, APIs: 2, Consumers: 2, Schedulers: 3, Notifiers: 2, Pprof: on}}
		c.buildServices(func(n string) string { return n }, t.TempDir(), []string{"WR_REDIS_ADDR=x"}, "k", "a", "t")
		seen := map[string]string{}
		for _, p := range append(append(append(append([]*Proc{}, c.APIs...), c.Consumers...), c.Schedulers...), c.Notifiers...) {
			var addr string
			for _, e := range p.Env {
				if v, ok := strings.CutPrefix(e, "WR_PPROF_ADDR="); ok {
					addr = v
				}
			}
			if p.PprofAddr != addr {
				t.Fatalf("%s: PprofAddr %q, but WR_PPROF_ADDR=%q (the meter reads the heap there)", p.Name, p.PprofAddr, addr)
			}
			if !on {
				if addr != "" {
					t.Fatalf("%s: WR_PPROF_ADDR=%s without Pprof", p.Name, addr)
				}
				continue
			}
			want := c.addr(portOffset(t, c, p.Addr) + offPprof)
			if addr != want {
				t.Fatalf("%s: WR_PPROF_ADDR=%q, want %q (its HTTP port %s + %d)", p.Name, addr, want, p.Addr, offPprof)
			}
			if other, dup := seen[addr]; dup {
				t.Fatalf("%s and %s share the pprof port %s", p.Name, other, addr)
			}
			seen[addr] = p.Name
		}
		if on && len(seen) != 9 {
			t.Fatalf("%d services with a pprof port, want 9", len(seen))
		}
	}
}

// portOffset is addr's offset from the cluster's base port.
func portOffset(t *testing.T, c *Cluster, addr string) int {
	t.Helper()
	for off := 0; off < offPprof; off++ {
		if c.addr(off) == addr {
			return off
		}
	}
	t.Fatalf("%s is not a port of the layout", addr)
	return 0
}
