package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/config"
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

func TestHTTPValidate(t *testing.T) {
	def, err := config.Defaults[config.HTTP]()
	require.NoError(t, err)
	require.NoError(t, def.Validate())
	assert.Equal(t, config.HTTP{ShutdownTimeout: 10 * time.Second, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, H2CMaxStreams: 250}, def)
	for _, c := range []struct {
		name string
		edit func(*config.HTTP)
		want string
	}{
		{"no drain", func(h *config.HTTP) { h.ShutdownTimeout = 0 }, "WR_SHUTDOWN_TIMEOUT must be positive, not 0s"},
		{"no header timeout", func(h *config.HTTP) { h.ReadHeaderTimeout = 0 }, "WR_HTTP_READ_HEADER_TIMEOUT must be positive, not 0s"},
		{"read shorter than headers", func(h *config.HTTP) { h.ReadTimeout = time.Second },
			"WR_HTTP_READ_TIMEOUT (1s) must be at least WR_HTTP_READ_HEADER_TIMEOUT (5s): it bounds the headers too"},
		{"negative h2c streams", func(h *config.HTTP) { h.H2CMaxStreams = -1 }, "WR_HTTP_H2C_MAX_STREAMS must not be negative (0: HTTP/1.1 alone), not -1"},
	} {
		h := def
		c.edit(&h)
		assert.EqualError(t, h.Validate(), c.want, c.name)
	}
}

func TestLoadRefusesABadHTTPTimeout(t *testing.T) {
	t.Setenv("WR_HTTP_READ_HEADER_TIMEOUT", "-1s")
	_, err := config.Load[struct{ HTTP config.HTTP }]()
	assert.ErrorContains(t, err, "WR_HTTP_READ_HEADER_TIMEOUT must be positive")
}

func TestRefusePublished(t *testing.T) {
	for _, c := range []struct {
		value string
		want  bool
	}{
		{"dev-key", true},
		{" dev-key\n", true},
		{"other-dev-key", true},
		{"", false},
		{"dev-key2", false},
		{"DEV-KEY", false},
	} {
		err := config.RefusePublished("WR_X_KEY", c.value, "dev-key", "other-dev-key")
		if !c.want {
			assert.NoError(t, err, "%q", c.value)
			continue
		}
		assert.ErrorIs(t, err, config.ErrPublishedKey, "%q", c.value)
		assert.ErrorContains(t, err, "WR_X_KEY is a development key published in waitroom's source", "%q", c.value)
	}
}
