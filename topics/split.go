package topics

import (
	"encoding/json"
	"strconv"
)

// MaxAdmissionEventBytes is the default bound of one admission record's
// value: under real Kafka's default message size (1 MB, message.max.bytes
// 1,048,588) and franz-go's default batch size (1,000,012 bytes), with room
// for the key, headers and record overhead.
const MaxAdmissionEventBytes = 900_000

// SplitAdmission cuts ev into consecutive events whose encoded value is at
// most maxBytes each, carrying ev.Admitted in order (their concatenation is
// ev.Admitted); every part repeats ev's other fields. An event without
// admissions stays one event. A part always carries at least one tokenId, so
// a maxBytes below one tokenId's event yields one tokenId per event.
func SplitAdmission(ev AdmissionEvent, maxBytes int) []AdmissionEvent {
	if ev.Admitted == nil {
		ev.Admitted = []string{}
	}
	if len(ev.Admitted) == 0 {
		return []AdmissionEvent{ev}
	}
	envelope := ev
	envelope.Admitted = []string{}
	envelope.ExpiresAt = nil
	base := len(Encode(&envelope)) // with "[]": each id adds its JSON string and a comma
	withExp := len(ev.ExpiresAt) == len(ev.Admitted)
	if withExp {
		base += len(`,"expiresAt":[]`) // each expiry adds its digits and a comma
	} else {
		ev.ExpiresAt = nil
	}
	cost := func(i int) int {
		n := jsonStringLen(ev.Admitted[i])
		if withExp {
			n += len(strconv.FormatInt(ev.ExpiresAt[i], 10))
		}
		return n
	}
	var out []AdmissionEvent
	lo, size := 0, base
	for i := range ev.Admitted {
		add := cost(i)
		if i > lo {
			add++ // the comma
			if withExp {
				add++
			}
		}
		if i > lo && size+add > maxBytes {
			part := ev
			part.Admitted = ev.Admitted[lo:i:i]
			if withExp {
				part.ExpiresAt = ev.ExpiresAt[lo:i:i]
			}
			out = append(out, part)
			lo, size, add = i, base, cost(i)
		}
		size += add
	}
	part := ev
	part.Admitted = ev.Admitted[lo:]
	if withExp {
		part.ExpiresAt = ev.ExpiresAt[lo:]
	}
	return append(out, part)
}

// jsonStringLen is the length of s encoded as a JSON string by encoding/json.
func jsonStringLen(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return len(b)
		}
	}
	return len(s) + 2
}
