package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/config"
)

type sample struct {
	Addr  string        `env:"WR_TEST_ADDR" envDefault:"127.0.0.1:1"`
	Every time.Duration `env:"WR_TEST_EVERY" envDefault:"3s"`
	Kafka config.Kafka
}

func TestDefaultsIgnoreTheEnvironment(t *testing.T) {
	t.Setenv("WR_TEST_ADDR", "elsewhere:2")
	t.Setenv("WR_KAFKA_BROKERS", "k:1")
	loaded, err := config.Load[sample]()
	require.NoError(t, err)
	assert.Equal(t, "elsewhere:2", loaded.Addr)
	def, err := config.Defaults[sample]()
	require.NoError(t, err)
	assert.Equal(t, sample{Addr: "127.0.0.1:1", Every: 3 * time.Second,
		Kafka: config.Kafka{Brokers: []string{"127.0.0.1:9092"}, ClientID: "waitroom"}}, def)
}
