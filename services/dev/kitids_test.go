package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/kit/go/waitroomkit"
	"github.com/waitroom/waitroom/pkg/security/assertion"
	"github.com/waitroom/waitroom/topics"
)

// The kit restates waitroom's id rule (it depends on nothing of waitroom).
// It must sign an assertion for every id the room accepts and for no other:
// an assertion the api refuses would cost the user the plain page's place
// instead of the one the site vouches for.
func TestTheKitAssertsOnlyWhatTheRoomAccepts(t *testing.T) {
	secret := strings.Repeat("s", 32)
	kit, err := waitroomkit.NewAsserter("shop", []byte(secret))
	require.NoError(t, err)
	room := roomWith(t, secret)
	for _, n := range []int{1, topics.MaxIDLen - 1, topics.MaxIDLen, topics.MaxIDLen + 1, 2 * topics.MaxIDLen} {
		user := strings.Repeat("u", n)
		raw, err := kit.Assert(user, "gig")
		if !topics.ValidID(user) {
			require.Error(t, err, "the kit signs a userId of %d characters, which the room refuses", n)
			continue
		}
		require.NoError(t, err, "the kit refuses a userId of %d characters, which the room accepts", n)
		c, err := room.Verify(raw, "gig")
		require.NoError(t, err, "the room refuses the kit's assertion for a userId of %d characters", n)
		require.Equal(t, user, c.UserID)
	}
	_, err = kit.Assert("alice", strings.Repeat("i", topics.MaxIDLen+1))
	require.Error(t, err, "the kit signs an itemId the room refuses")
}

// The kit signs HS256 assertions with the bytes the shop gives it, and its
// example gives it the very string set on waitroom as WR_ASSERTION_SECRET
// ("≥ 32 bytes, also set on waitroom"). The room must take those
// assertions for every secret it accepts: a hex secret (openssl rand -hex
// 32) or a base64 one (openssl rand -base64 32) is also valid base64 of 32
// bytes or more, which the room decodes, and a shop that gave the kit the
// decoded bytes must still be heard too.
func TestTheRoomTakesTheKitsAssertionsWithTheSameSecret(t *testing.T) {
	decoded := make([]byte, 32)
	for i := range decoded {
		decoded[i] = byte(i * 7)
	}
	for name, c := range map[string]struct {
		room string // WR_ASSERTION_SECRET
		kit  []byte // what the shop gives NewAsserter
	}{
		"plain text":         {"a-site-secret-of-at-least-32-bytes!!", []byte("a-site-secret-of-at-least-32-bytes!!")},
		"hex, as set":        {hex.EncodeToString(decoded), []byte(hex.EncodeToString(decoded))},
		"base64, as set":     {base64.StdEncoding.EncodeToString(decoded), []byte(base64.StdEncoding.EncodeToString(decoded))},
		"base64, decoded":    {base64.StdEncoding.EncodeToString(decoded), decoded},
		"48 letters, as set": {strings.Repeat("Abcd", 12), []byte(strings.Repeat("Abcd", 12))},
	} {
		kit, err := waitroomkit.NewAsserter("shop", c.kit)
		require.NoError(t, err, name)
		room := roomWith(t, c.room)
		raw, err := kit.Assert("alice", "gig")
		require.NoError(t, err, name)
		got, err := room.Verify(raw, "gig")
		require.NoError(t, err, "%s: the room refuses the kit's assertion signed with the secret it was given", name)
		require.Equal(t, "alice", got.UserID, name)
	}
	// Another secret is still refused.
	kit, err := waitroomkit.NewAsserter("shop", []byte(strings.Repeat("x", 32)))
	require.NoError(t, err)
	room := roomWith(t, hex.EncodeToString(decoded))
	raw, err := kit.Assert("alice", "gig")
	require.NoError(t, err)
	_, err = room.Verify(raw, "gig")
	require.ErrorIs(t, err, assertion.ErrInvalid)
}

// roomWith is the api's verifier of the site "shop"'s assertions, HS256
// with secret (WR_ASSERTION_SECRET).
func roomWith(t *testing.T, secret string) *assertion.Verifier {
	t.Helper()
	v, err := assertion.New(context.Background(), assertion.Config{Issuer: "shop", Secret: secret, MaxTTL: 10 * time.Minute})
	require.NoError(t, err)
	return v
}
