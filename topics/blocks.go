package topics

import (
	"fmt"
	"net/netip"
	"strings"
)

// Block subjects: a userId or an address range.
const (
	BlockUserPrefix = "user:"
	BlockIPPrefix   = "ip:"
	// MaxBlockReason bounds a block's reason (the refused client reads it).
	MaxBlockReason = 300
)

// BlockState is a record of waitroom.blocks (compacted): an operator's block
// on a userId ("user:<id>") or an address range ("ip:<cidr>", masked, e.g.
// "ip:203.0.113.0/24"). Key: Subject; a nil value (tombstone) lifts it.
type BlockState struct {
	V       int    `json:"v"`
	Subject string `json:"subject"`
	Reason  string `json:"reason,omitempty"`
	// Until (unix ms) is when the block ends by itself; 0: until lifted.
	Until int64 `json:"until,omitempty"`
	At    int64 `json:"at"` // unix ms, when it was set
}

// BlockSubject normalises what an operator typed into a subject: "user:<id>",
// "ip:<cidr>" (masked to its prefix) or "ip:<address>" (a /32 or /128).
func BlockSubject(s string) (string, error) {
	switch {
	case strings.HasPrefix(s, BlockUserPrefix):
		if id := s[len(BlockUserPrefix):]; !ValidID(id) {
			return "", fmt.Errorf("%w: block subject %q: the userId is not %s", ErrInvalid, s, IDRule)
		}
		return s, nil
	case strings.HasPrefix(s, BlockIPPrefix):
		p, err := ParseBlockRange(s[len(BlockIPPrefix):])
		if err != nil {
			return "", fmt.Errorf("%w: block subject %q: %v", ErrInvalid, s, err)
		}
		return BlockIPPrefix + p.String(), nil
	}
	return "", fmt.Errorf("%w: block subject %q is not user:<userId> or ip:<cidr>", ErrInvalid, s)
}

// ParseBlockRange parses a CIDR or a single address into its masked prefix
// (IPv4-mapped IPv6 addresses are taken as IPv4).
func ParseBlockRange(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// Validate checks the fields against the contract; the subject must already
// be in its normal form (BlockSubject).
func (b *BlockState) Validate() error {
	norm, err := BlockSubject(b.Subject)
	switch {
	case err != nil:
		return err
	case norm != b.Subject:
		return fmt.Errorf("%w: block subject %q is not in normal form (%q)", ErrInvalid, b.Subject, norm)
	case len(b.Reason) > MaxBlockReason:
		return fmt.Errorf("%w: block reason longer than %d bytes", ErrInvalid, MaxBlockReason)
	case b.Until < 0:
		return fmt.Errorf("%w: block until %d is negative", ErrInvalid, b.Until)
	case b.At <= 0:
		return fmt.Errorf("%w: block at %d is not positive", ErrInvalid, b.At)
	}
	return nil
}

// Active reports whether the block holds at nowMs.
func (b *BlockState) Active(nowMs int64) bool { return b.Until == 0 || nowMs < b.Until }

// DecodeBlock decodes and validates a blocks record value.
func DecodeBlock(b []byte) (BlockState, error) {
	var s BlockState
	if err := decodeStrict(b, &s, &s.V); err != nil {
		return BlockState{}, err
	}
	return s, s.Validate()
}
