// Package fieldmac signs short records of strings and numbers (the notifier's
// stream cursor, the api's status cursor) with a keyed HMAC-SHA256 cut to
// 128 bits, so a replica that holds the same key can trust what another issued.
package fieldmac

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"strconv"
	"sync"
)

// Size is a MAC's length in bytes (128 bits: 22 characters of base64url).
const Size = 16

// EncodedLen is a MAC's length in base64url without padding.
const EncodedLen = 22

// Signer MACs records with one key; safe for concurrent use. Its keyed
// HMAC states are reused through a pool: hmac.New costs two SHA-256 blocks
// for the key's pads and four allocations, and Reset returns a used one to
// its keyed state without them.
type Signer struct {
	key  []byte
	macs sync.Pool // *state
}

type state struct {
	h   hash.Hash
	msg []byte
	sum []byte
}

// New returns a Signer of key (the key is copied).
func New(key []byte) *Signer {
	return &Signer{key: bytes.Clone(key)}
}

// Random returns a Signer of a random key: its MACs check on this process only.
func Random() *Signer {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // never fails (crypto/rand)
	return &Signer{key: k}
}

// KeyOf derives a key for purpose from a secret every replica holds, so a
// record one replica signed checks on another, and a record signed for one
// purpose never checks for another.
func KeyOf(secret, purpose string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// Sum is the MAC of the record strs, nums: each string length-prefixed
// ("<len>:<s>"), then each number after a '|', so no two records share a
// message.
func (s *Signer) Sum(strs []string, nums []int64) [Size]byte {
	m, _ := s.macs.Get().(*state)
	if m == nil {
		m = &state{h: hmac.New(sha256.New, s.key), msg: make([]byte, 0, 128), sum: make([]byte, 0, sha256.Size)}
	} else {
		m.h.Reset()
	}
	b := m.msg[:0]
	for _, f := range strs {
		b = strconv.AppendInt(b, int64(len(f)), 10)
		b = append(b, ':')
		b = append(b, f...)
	}
	for _, n := range nums {
		b = append(b, '|')
		b = strconv.AppendInt(b, n, 10)
	}
	m.h.Write(b)
	var mac [Size]byte
	copy(mac[:], m.h.Sum(m.sum[:0]))
	m.msg = b
	s.macs.Put(m)
	return mac
}

// Append appends the MAC of the record to dst in base64url (EncodedLen bytes).
func (s *Signer) Append(dst []byte, strs []string, nums []int64) []byte {
	mac := s.Sum(strs, nums)
	return base64.RawURLEncoding.AppendEncode(dst, mac[:])
}

// Check reports whether enc is the base64url MAC of the record, in constant
// time; false for anything malformed.
func (s *Signer) Check(enc string, strs []string, nums []int64) bool {
	if len(enc) != EncodedLen {
		return false
	}
	var mac [Size]byte
	if n, err := base64.RawURLEncoding.Decode(mac[:], []byte(enc)); err != nil || n != Size {
		return false
	}
	want := s.Sum(strs, nums)
	return hmac.Equal(mac[:], want[:])
}
