package httpapi

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/gin-gonic/gin"
)

// addressKeys names the throttle buckets of a client address: an IPv4
// address is one client (narrow) with no wider bucket; an IPv6 address counts
// by its /64 (narrow: one subscriber's link, where a client picks any of 2^64
// addresses at will) and by its /48 (wide: one site, often one customer).
// IPv4-mapped IPv6 (::ffff:a.b.c.d) is IPv4. A string that is no address is
// its own narrow key.
func addressKeys(ip string) (narrow, wide string) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip, ""
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String(), ""
	}
	p64, _ := a.Prefix(64) // cannot fail: 64 and 48 are within an IPv6 address's 128 bits
	p48, _ := a.Prefix(48)
	return p64.String(), p48.String()
}

// parseTrusted reads WR_TRUSTED_PROXIES: CIDRs, or single addresses.
func parseTrusted(cidrs []string) ([]string, error) {
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

// trustProxies sets where e finds a request's client address (gin's
// ClientIP, which the throttles and blocks key by): the peer's address, or,
// when the peer is in cidrs (the front door's), the right-most address of
// X-Forwarded-For that is not itself in cidrs. Nothing else: no X-Real-IP,
// no platform header, and with cidrs empty no header at all, so a client
// reaching the api directly cannot choose its own bucket.
func trustProxies(e *gin.Engine, cidrs []string) error {
	trusted, err := parseTrusted(cidrs)
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
