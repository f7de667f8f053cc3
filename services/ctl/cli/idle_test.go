package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/itemcache"
	"go.uber.org/zap"
)

// --idle-timeout sets the item's idleTimeoutSeconds (and 0 turns it off).
func TestItemsSetIdleTimeout(t *testing.T) {
	brokers := testenv.Kafka(t, 1)
	env := []string{"WR_KAFKA_BROKERS=" + strings.Join(brokers, ",")}
	r := runBin(t, env, "items", "set", "shoes", "--idle-timeout", "2m")
	require.Equal(t, ExitOK, r.code, r)
	cache, err := itemcache.New([]kgo.Opt{kgo.SeedBrokers(brokers...)}, zap.NewNop())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { _ = cache.Run(ctx) }()
	require.NoError(t, cache.Sync(ctx))
	s, ok := cache.Get("shoes")
	require.True(t, ok)
	assert.EqualValues(t, 120, s.IdleTimeoutSeconds)

	r = runBin(t, env, "items", "set", "shoes", "--idle-timeout", "0s")
	require.Equal(t, ExitOK, r.code, r)
	require.NoError(t, cache.Sync(ctx))
	s, _ = cache.Get("shoes")
	assert.Zero(t, s.IdleTimeoutSeconds)
	assert.EqualValues(t, 2, s.Version)
}
