package httpapi

import "net/netip"

// networkOf is the network of the client at ip that a registration record
// keeps: the /24 of an IPv4 address, the /48 of an IPv6 one ("" when ip does
// not parse). The record keeps it for as long as the registrations topic keeps
// records, and Kafka cannot erase one record; a network, shared by many
// people, still shows a code shared across the world (bypass audit) without
// pointing at a person. Blocks and throttles judge the live address of the
// request, never the record's.
func networkOf(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	a = a.Unmap()
	bits := 48
	if a.Is4() {
		bits = 24
	}
	p, err := a.WithZone("").Prefix(bits)
	if err != nil {
		return ""
	}
	var b [64]byte // the longest, an IPv6 /48, is 19 bytes: one allocation, the string
	return string(p.AppendTo(b[:0]))
}
