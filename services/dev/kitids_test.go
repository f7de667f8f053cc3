package main

import (
	"context"
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
	room, err := assertion.New(context.Background(), assertion.Config{Issuer: "shop", Secret: secret, MaxTTL: 10 * time.Minute})
	require.NoError(t, err)
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
