package httpserver

import (
	"net/url"
	"strings"
)

// QueryValue is the first value of key in the raw query q, as
// url.ParseQuery(q).Get(key) gives it, found without building the map: a
// status poll sends its cursor (and an EventSource its token) in the query of
// every read. A query with an escape ('%', '+') or a ';' goes to
// url.ParseQuery, which unescapes or skips such pairs, as does one of more
// than manyPairs pairs (the library refuses one past its limit, 10,000
// unless GODEBUG urlmaxqueryparams sets another); otherwise a pair's key and
// value are its own bytes, so the answer is a piece of q and nothing is
// allocated.
func QueryValue(q, key string) string {
	if q == "" {
		return ""
	}
	if strings.IndexByte(q, '%') >= 0 || strings.IndexByte(q, '+') >= 0 || strings.IndexByte(q, ';') >= 0 ||
		strings.Count(q, "&") >= manyPairs { // each a vector scan: cheaper than one loop over q's bytes
		return libraryValue(q, key)
	}
	for rest := q; rest != ""; {
		var pair string
		pair, rest, _ = strings.Cut(rest, "&")
		if k, v, _ := strings.Cut(pair, "="); k == key && pair != "" {
			return v
		}
	}
	return ""
}

// manyPairs is how many pairs send a query to the library whatever they hold.
const manyPairs = 1000

// libraryValue is url.URL.Query's answer: a malformed pair is skipped.
func libraryValue(q, key string) string {
	v, _ := url.ParseQuery(q)
	return v.Get(key)
}
