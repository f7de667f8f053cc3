package topics

// The registration record is decoded without reflection when it has the
// shape the api writes: one object of known fields (exact names, each once),
// strings of printable ASCII without escapes, integers without fraction or
// exponent, "client" an object of its strings. Anything else (a bypass or a
// draw, a null, an escape, other bytes, a repeated or differently cased key)
// goes to the strict library path, which decides as before.
// FuzzDecodeRegistrationFastAgrees holds the two to the same answer.

// flat scans JSON of that shape.
type flat struct {
	b []byte
	i int
}

func (s *flat) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// is consumes c (after whitespace) when it is next.
func (s *flat) is(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes.
func (s *flat) str() ([]byte, bool) {
	if !s.is('"') {
		return nil, false
	}
	for j := s.i; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			v := s.b[s.i:j]
			s.i = j + 1
			return v, true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return nil, false
		}
	}
	return nil, false
}

// int reads an integer of at most 18 digits (no overflow), no fraction or
// exponent.
func (s *flat) int() (int64, bool) {
	s.space()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	start := s.i
	var n int64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		n = n*10 + int64(s.b[s.i]-'0')
		s.i++
	}
	digits := s.i - start
	if digits == 0 || digits > 18 || (digits > 1 && s.b[start] == '0') {
		return 0, false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// object reads an object, calling field for each key with the scanner at
// its value; field reports false to give up.
func (s *flat) object(field func(key []byte) bool) bool {
	if !s.is('{') {
		return false
	}
	if s.is('}') {
		return true
	}
	for {
		k, ok := s.str()
		if !ok || !s.is(':') || !field(k) {
			return false
		}
		if s.is('}') {
			return true
		}
		if !s.is(',') {
			return false
		}
	}
}

// end reports whether only whitespace is left.
func (s *flat) end() bool {
	s.space()
	return s.i == len(s.b)
}

// text is v as a string, the kinds and holders as their constants (no
// allocation).
func text(v []byte) string {
	for _, c := range [...]string{KindRegister, KindLeave, HolderToken, HolderUser} {
		if string(v) == c {
			return c
		}
	}
	return string(v)
}

// decodeRegistrationFast decodes b into e when it has the shape above; on
// false e holds a part of it and is to be thrown away.
func decodeRegistrationFast(b []byte, e *RegistrationEvent) bool {
	s := flat{b: b}
	var seen uint16
	once := func(bit uint16) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	}
	str := func(into *string, bit uint16) bool {
		v, ok := s.str()
		*into = text(v)
		return ok && once(bit)
	}
	num := func(into *int64, bit uint16) bool {
		n, ok := s.int()
		*into = n
		return ok && once(bit)
	}
	ok := s.object(func(k []byte) bool {
		switch string(k) {
		case "v":
			var v int64
			ok := num(&v, 1)
			e.V = int(v)
			return ok
		case "kind":
			return str(&e.Kind, 2)
		case "tokenId":
			return str(&e.TokenID, 4)
		case "itemId":
			return str(&e.ItemID, 8)
		case "userId":
			return str(&e.UserID, 16)
		case "requestedAt":
			return num(&e.RequestedAt, 32)
		case "window":
			return num(&e.Window, 64)
		case "holder":
			return str(&e.Holder, 128)
		case "client":
			if !once(256) {
				return false
			}
			c := &ClientMeta{}
			e.Client = c
			var cs uint8
			return s.object(func(k []byte) bool {
				var into *string
				var bit uint8
				switch string(k) {
				case "ip":
					into, bit = &c.IP, 1
				case "userAgent":
					into, bit = &c.UserAgent, 2
				default:
					return false
				}
				v, ok := s.str()
				*into = string(v)
				if !ok || cs&bit != 0 {
					return false
				}
				cs |= bit
				return true
			})
		}
		return false
	})
	return ok && s.end()
}
