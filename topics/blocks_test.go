package topics

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBlockSubject(t *testing.T) {
	for in, want := range map[string]string{
		"user:alice": "user:alice", "ip:203.0.113.7/24": "ip:203.0.113.0/24", "ip:203.0.113.7": "ip:203.0.113.7/32",
		"ip:2001:db8::1/48": "ip:2001:db8::/48", "ip:::ffff:10.1.2.3": "ip:10.1.2.3/32", "ip:::ffff:10.1.2.3/120": "ip:10.1.2.0/24",
	} {
		got, err := BlockSubject(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "alice", "user:", "user:a b", "ip:", "ip:300.1.1.1", "ip:1.2.3.4/33", "host:x"} {
		_, err := BlockSubject(bad)
		assert.ErrorIs(t, err, ErrInvalid, bad)
	}
}

func TestDecodeBlock(t *testing.T) {
	b := BlockState{V: 1, Subject: "ip:10.0.0.0/8", Reason: "scalpers", Until: 9, At: 5}
	got, err := DecodeBlock(Encode(&b))
	require.NoError(t, err)
	assert.Equal(t, b, got)
	for raw, want := range map[string]error{
		`{`:                                 ErrMalformed,
		`{"v":2,"subject":"user:a","at":1}`: ErrMalformed,
		`{"v":1,"subject":"user:a","at":1,"x":1}`:      ErrMalformed,
		`{"v":1,"subject":"user:a"}`:                   ErrInvalid,
		`{"v":1,"subject":"ip:10.0.0.1/8","at":1}`:     ErrInvalid, // not masked
		`{"v":1,"subject":"bob","at":1}`:               ErrInvalid,
		`{"v":1,"subject":"user:a","at":1,"until":-1}`: ErrInvalid,
	} {
		_, err := DecodeBlock([]byte(raw))
		assert.True(t, errors.Is(err, want), "%s: %v", raw, err)
	}
	assert.True(t, (&BlockState{Until: 0}).Active(1e15))
	assert.False(t, (&BlockState{Until: 10}).Active(10))
}
