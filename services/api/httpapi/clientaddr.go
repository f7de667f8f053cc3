package httpapi

import "github.com/waitroom/waitroom/pkg/web/httpserver"

// addressKeys names the throttle buckets of a client address: its networks
// (httpserver.ClientPrefixes); a string that is no address is its own
// narrow key.
func addressKeys(ip string) (narrow, wide string) {
	n, w, ok := httpserver.ClientPrefixes(ip)
	switch {
	case !ok:
		return ip, ""
	case !w.IsValid():
		return n.Addr().String(), ""
	}
	return n.String(), w.String()
}
