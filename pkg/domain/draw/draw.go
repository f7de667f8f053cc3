// Package draw is the committed-seed lottery of a pre-queue and of random
// mode: the hash chain an item commits to, the check of a revealed seed, and
// the order a seed gives a set of registrations. Everything is defined on
// bytes, so anyone can recompute a draw from the records (see Order).
package draw

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
)

// Root is the secret root of item's hash chain: HMAC-SHA256 under key of
// "waitroom-draw-v1" 0x00 itemId 0x00 salt. The salt is public (the item's
// drawSalt) and new for each commitment, so a new chain never reuses an old
// root whose seeds were revealed.
func Root(key []byte, item, salt string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("waitroom-draw-v1\x00" + item + "\x00" + salt))
	return m.Sum(nil)
}

// hashN applies sha256 n times to b.
func hashN(b []byte, n int64) []byte {
	h := slices.Clone(b)
	for range n {
		s := sha256.Sum256(h)
		h = s[:]
	}
	return h
}

// Commit is the commitment to a chain of rounds seeds from root:
// sha256 applied rounds times, hex. It costs rounds hashes (about 0.3 µs each).
func Commit(root []byte, rounds int64) string {
	return hex.EncodeToString(hashN(root, rounds))
}

// Seed is the seed of round (1..rounds) of the chain: sha256 applied
// rounds-round times to root, hex. Revealing round i tells nothing of round
// i+1 (its sha256 preimage).
func Seed(root []byte, rounds, round int64) (string, error) {
	if round < 1 || round > rounds {
		return "", fmt.Errorf("draw round %d is not in 1..%d", round, rounds)
	}
	return hex.EncodeToString(hashN(root, rounds-round)), nil
}

// ErrMismatch: a revealed seed is not the committed chain's.
var ErrMismatch = errors.New("the seed does not hash to the commitment")

// Verify checks a revealed seed of round against commit: sha256 applied
// round times to the seed's bytes must give commit.
func Verify(seed string, round int64, commit string) error {
	b, err := hex.DecodeString(seed)
	if err != nil || len(b) != sha256.Size {
		return fmt.Errorf("seed %q is not 32 hex bytes", seed)
	}
	c, err := hex.DecodeString(commit)
	if err != nil || len(c) != sha256.Size {
		return fmt.Errorf("commit %q is not 32 hex bytes", commit)
	}
	if round < 1 {
		return fmt.Errorf("draw round %d is not positive", round)
	}
	if !bytes.Equal(hashN(b, round), c) {
		return fmt.Errorf("%w: sha256^%d(seed) != %s", ErrMismatch, round, commit)
	}
	return nil
}

// Key is a registration's draw key: sha256(seed bytes || tokenId bytes).
func Key(seed []byte, tokenID string) [sha256.Size]byte {
	h := sha256.New()
	h.Write(seed)
	h.Write([]byte(tokenID))
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// Order sorts tokenIDs in place into the draw order of seed (hex): ascending
// Key, ties (never seen in practice) by tokenId. The order depends only on
// the seed and the set, not on how tokenIDs were ordered before.
func Order(seed string, tokenIDs []string) error {
	s, err := hex.DecodeString(seed)
	if err != nil || len(s) != sha256.Size {
		return fmt.Errorf("seed %q is not 32 hex bytes", seed)
	}
	type keyed struct {
		k  [sha256.Size]byte
		id string
	}
	ks := make([]keyed, len(tokenIDs))
	for i, id := range tokenIDs {
		ks[i] = keyed{Key(s, id), id}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		if c := bytes.Compare(a.k[:], b.k[:]); c != 0 {
			return c
		}
		return bytes.Compare([]byte(a.id), []byte(b.id))
	})
	for i := range ks {
		tokenIDs[i] = ks[i].id
	}
	return nil
}

// DefaultRounds is the length of a new chain: a pre-queue and, in random
// mode, a week of one-minute windows. Deriving a seed costs up to this many
// hashes (a few milliseconds).
const DefaultRounds = 10_000

// DevKey is the development stack's WR_DRAW_KEY: not a secret, so its draws
// are predictable to anyone who reads this; the schedulers refuse it outside
// the dev stack.
const DevKey = "waitroom-dev-draw-key-not-secret"
