package promote

import (
	"context"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
)

// A follower's failed try is the ordinary case, not a warning: isTaken must
// recognise what redsync really returns when another replica holds the lock.
func TestIsTakenMatchesRedsync(t *testing.T) {
	rs := redsync.New(goredis.NewPool(testenv.Redis(t)))
	ctx := context.Background()
	a := rs.NewMutex(LockName, redsync.WithExpiry(5*time.Second), redsync.WithTries(1))
	require.NoError(t, a.TryLockContext(ctx))
	b := rs.NewMutex(LockName, redsync.WithExpiry(5*time.Second), redsync.WithTries(1))
	err := b.TryLockContext(ctx)
	require.Error(t, err)
	assert.True(t, isTaken(err), "not recognised as taken: %T %v", err, err)
}
