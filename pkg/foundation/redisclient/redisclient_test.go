package redisclient_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/redisclient"
)

func TestRedisClientOfEachMode(t *testing.T) {
	for mode, want := range map[string]string{"single": "*redis.Client", "sentinel": "*redis.Client", "cluster": "*redis.ClusterClient"} {
		r := config.Redis{Mode: mode, Addrs: []string{"127.0.0.1:1"}, PoolSize: 1}
		if mode == "sentinel" {
			r.SentinelMaster = "mymaster"
		}
		c, err := redisclient.New(r)
		require.NoError(t, err, mode)
		assert.Equal(t, want, fmt.Sprintf("%T", c), mode)
		require.NoError(t, c.Close())
	}
	_, err := redisclient.New(config.Redis{Mode: "cluster"})
	assert.ErrorContains(t, err, "WR_REDIS_ADDRS")
}
