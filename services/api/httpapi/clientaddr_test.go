package httpapi

import (
	"net"
	"net/netip"
	"testing"
)

func TestAddressKeys(t *testing.T) {
	for _, c := range []struct{ ip, narrow, wide string }{
		{"203.0.113.7", "203.0.113.7", ""},
		{"::ffff:203.0.113.7", "203.0.113.7", ""}, // IPv4-mapped is IPv4
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64", "2001:db8:1::/48"},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64", "2001:db8:1::/48"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64", "2001:db8:1::/48"}, // another /64, the same /48
		{"2001:db8:2::1", "2001:db8:2::/64", "2001:db8:2::/48"},
		{"2001:DB8:1:2::9", "2001:db8:1:2::/64", "2001:db8:1::/48"}, // one spelling per bucket
		{"fe80::1%eth0", "fe80::/64", "fe80::/48"},                  // the zone is no part of it
		{"::1", "::/64", "::/48"},
		{"not-an-address", "not-an-address", ""},
		{"", "", ""},
	} {
		narrow, wide := addressKeys(c.ip)
		if narrow != c.narrow || wide != c.wide {
			t.Errorf("addressKeys(%q) = %q, %q; want %q, %q", c.ip, narrow, wide, c.narrow, c.wide)
		}
	}
}

// FuzzAddressKeys checks addressKeys against the net package's masks: an
// IPv6 address's keys are its /64 and /48, every address of a /64 shares
// them, and an IPv4 address (mapped or not) is its own key.
func FuzzAddressKeys(f *testing.F) {
	for _, s := range []string{"203.0.113.7", "::ffff:10.0.0.1", "2001:db8:1:2:3:4:5:6", "fe80::1%eth0", "::", "1.2.3", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		narrow, wide := addressKeys(s)
		a, err := netip.ParseAddr(s)
		if err != nil {
			if narrow != s || wide != "" {
				t.Fatalf("%q is no address: keys %q, %q", s, narrow, wide)
			}
			return
		}
		a = a.Unmap().WithZone("")
		if a.Is4() {
			if narrow != a.String() || wide != "" || net.ParseIP(narrow).To4() == nil {
				t.Fatalf("IPv4 %q: keys %q, %q", s, narrow, wide)
			}
			return
		}
		ip := net.IP(a.AsSlice())
		for _, k := range []struct {
			key  string
			bits int
		}{{narrow, 64}, {wide, 48}} {
			p, err := netip.ParsePrefix(k.key)
			if err != nil || p.Bits() != k.bits || !p.Contains(a) {
				t.Fatalf("%q: key %q is not its /%d (%v)", s, k.key, k.bits, err)
			}
			masked := ip.Mask(net.CIDRMask(k.bits, 128))
			if p.Addr().String() != masked.String() {
				t.Fatalf("%q: /%d key %q, net masks it to %s", s, k.bits, k.key, masked)
			}
		}
		// Any other address of the same /64 meets the same buckets.
		b := a.As16()
		for i := 8; i < 16; i++ {
			b[i] ^= 0xa5
		}
		if n2, w2 := addressKeys(netip.AddrFrom16(b).String()); n2 != narrow || w2 != wide {
			t.Fatalf("%q and its /64 neighbour differ: %q, %q vs %q, %q", s, narrow, wide, n2, w2)
		}
	})
}
