package httpserver

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/gin-gonic/gin"
)

// ClientPrefixes are the networks a client address counts by, for every
// bucket and cap keyed by address: an IPv4 address is one client (narrow, a
// /32) with no wider network; an IPv6 address counts by its /64 (narrow: one
// subscriber's link, where a client picks any of 2^64 addresses at will) and
// by its /48 (wide: one site, often one customer). IPv4-mapped IPv6
// (::ffff:a.b.c.d) is IPv4. ok is false for a string that is no address.
func ClientPrefixes(ip string) (narrow, wide netip.Prefix, ok bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return narrow, wide, false
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32), wide, true
	}
	narrow, _ = a.Prefix(64) // cannot fail: 64 and 48 are within an IPv6 address's 128 bits
	wide, _ = a.Prefix(48)
	return narrow, wide, true
}

// ParseTrusted reads WR_TRUSTED_PROXIES: CIDRs, or single addresses.
func ParseTrusted(cidrs []string) ([]string, error) {
	out := make([]string, 0, len(cidrs))
	for _, s := range cidrs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if _, err := netip.ParsePrefix(s); err != nil {
			if _, aerr := netip.ParseAddr(s); aerr != nil {
				return nil, fmt.Errorf("WR_TRUSTED_PROXIES: %q is neither a CIDR nor an address", s)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// TrustProxies sets where e finds a request's client address (gin's
// ClientIP, which throttles, caps and blocks key by): the peer's address, or,
// when the peer is in cidrs (the front door's), the right-most address of
// X-Forwarded-For that is not itself in cidrs. Nothing else: no X-Real-IP,
// no platform header, and with cidrs empty no header at all, so a client
// reaching a service directly cannot choose its own bucket.
func TrustProxies(e *gin.Engine, cidrs []string) error {
	trusted, err := ParseTrusted(cidrs)
	if err != nil {
		return err
	}
	e.ForwardedByClientIP = true
	e.RemoteIPHeaders = []string{"X-Forwarded-For"}
	e.TrustedPlatform = ""
	if len(trusted) == 0 {
		trusted = nil // gin: trust no peer
	}
	if err := e.SetTrustedProxies(trusted); err != nil {
		return fmt.Errorf("WR_TRUSTED_PROXIES: %w", err)
	}
	return nil
}
