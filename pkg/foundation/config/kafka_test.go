package config_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"go.uber.org/zap/zapcore"
)

func TestKafkaSecurityValidate(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file.pem")
	require.NoError(t, os.WriteFile(f, []byte("x"), 0o600))
	up := func(m string) config.KafkaSecurity {
		return config.KafkaSecurity{SASLMechanism: m, SASLUsername: "u", SASLPassword: "p"}
	}
	for _, tc := range []struct {
		name string
		s    config.KafkaSecurity
		want string // "" = valid
	}{
		{"nothing", config.KafkaSecurity{}, ""},
		{"tls only", config.KafkaSecurity{TLS: true}, ""},
		{"tls with files", config.KafkaSecurity{TLS: true, TLSCAFile: f, TLSCertFile: f, TLSKeyFile: f, TLSServerName: "k"}, ""},
		{"plain", up(config.SASLPlain), ""},
		{"scram-256 any case", up("scram-sha-256"), ""},
		{"scram-512", up(config.SASLScram512), ""},
		{"oauth file", config.KafkaSecurity{SASLMechanism: config.SASLOAuthBearer, OAuthTokenFile: f}, ""},
		{"oauth command", config.KafkaSecurity{SASLMechanism: config.SASLOAuthBearer, OAuthTokenCommand: "cat x"}, ""},
		{"aws", config.KafkaSecurity{TLS: true, SASLMechanism: config.SASLAWSMSKIAM, AWSRegion: "eu-west-1"}, ""},
		{"tls file without tls", config.KafkaSecurity{TLSCAFile: f}, "set WR_KAFKA_TLS=true"},
		{"cert without key", config.KafkaSecurity{TLS: true, TLSCertFile: f}, "go together"},
		{"missing ca file", config.KafkaSecurity{TLS: true, TLSCAFile: f + ".nope"}, "WR_KAFKA_TLS_CA_FILE"},
		{"unknown mechanism", up("GSSAPI"), `WR_KAFKA_SASL_MECHANISM "GSSAPI"`},
		{"scram without password", config.KafkaSecurity{SASLMechanism: config.SASLScram256, SASLUsername: "u"}, "needs WR_KAFKA_SASL_USERNAME and WR_KAFKA_SASL_PASSWORD"},
		{"user without mechanism", config.KafkaSecurity{SASLUsername: "u"}, "without WR_KAFKA_SASL_MECHANISM"},
		{"oauth with neither", config.KafkaSecurity{SASLMechanism: config.SASLOAuthBearer}, "exactly one"},
		{"oauth with both", config.KafkaSecurity{SASLMechanism: config.SASLOAuthBearer, OAuthTokenFile: f, OAuthTokenCommand: "x"}, "exactly one"},
		{"oauth file missing", config.KafkaSecurity{SASLMechanism: config.SASLOAuthBearer, OAuthTokenFile: f + ".nope"}, "WR_KAFKA_SASL_OAUTH_TOKEN_FILE"},
		{"aws with password", config.KafkaSecurity{SASLMechanism: config.SASLAWSMSKIAM, SASLPassword: "p"}, "AWS SDK"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

type svc struct {
	Kafka config.Kafka
	Redis config.Redis
}

func TestLoadValidatesAndFieldMasksSecrets(t *testing.T) {
	t.Setenv("WR_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
	t.Setenv("WR_KAFKA_SASL_USERNAME", "svc")
	_, err := config.Load[svc]()
	require.ErrorContains(t, err, "needs WR_KAFKA_SASL_USERNAME and WR_KAFKA_SASL_PASSWORD", "Load must validate nested parts")

	t.Setenv("WR_KAFKA_SASL_PASSWORD", "hunter2-secret")
	t.Setenv("WR_KAFKA_TLS", "true")
	c, err := config.Load[svc]()
	require.NoError(t, err)
	assert.Equal(t, "hunter2-secret", c.Kafka.Security.SASLPassword)
	assert.True(t, c.Kafka.Security.TLS)

	enc := zapcore.NewMapObjectEncoder()
	config.Field(c).AddTo(enc)
	b, err := json.Marshal(enc.Fields)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "hunter2-secret")
	assert.Contains(t, string(b), `"WR_KAFKA_SASL_PASSWORD":"***"`)
	assert.Contains(t, string(b), `"WR_KAFKA_SASL_USERNAME":"svc"`)
}

func TestRedisValidate(t *testing.T) {
	f := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(f, []byte("x"), 0o600))
	for _, tc := range []struct {
		name string
		r    config.Redis
		want string // "" = valid
	}{
		{"single by addr", config.Redis{Addr: "r:6379"}, ""},
		{"single by addrs", config.Redis{Mode: "single", Addrs: []string{"r:6379"}}, ""},
		{"cluster", config.Redis{Mode: "CLUSTER", Addrs: []string{"a:1", "b:1"}}, ""},
		{"sentinel", config.Redis{Mode: "sentinel", Addrs: []string{"s:26379"}, SentinelMaster: "mymaster"}, ""},
		{"tls acl", config.Redis{Mode: "cluster", Addrs: []string{"a:1"}, TLS: true, TLSCAFile: f, TLSServerName: "r", Username: "u", Password: "p"}, ""},
		{"single with two", config.Redis{Addrs: []string{"a:1", "b:1"}}, "takes one address"},
		{"cluster without seeds", config.Redis{Mode: "cluster", Addr: "a:1"}, "needs seed nodes in WR_REDIS_ADDRS"},
		{"cluster db", config.Redis{Mode: "cluster", Addrs: []string{"a:1"}, DB: 2}, "database 0 alone"},
		{"sentinel without master", config.Redis{Mode: "sentinel", Addrs: []string{"s:1"}}, "WR_REDIS_SENTINEL_MASTER"},
		{"unknown mode", config.Redis{Mode: "ring", Addr: "a:1"}, `WR_REDIS_MODE "ring"`},
		{"tls file without tls", config.Redis{Addr: "a:1", TLSCAFile: f}, "set WR_REDIS_TLS=true"},
		{"insecure without tls", config.Redis{Addr: "a:1", TLSInsecureSkipVerify: true}, "set WR_REDIS_TLS=true"},
		{"cert without key", config.Redis{Addr: "a:1", TLS: true, TLSCertFile: f}, "go together"},
		{"missing ca", config.Redis{Addr: "a:1", TLS: true, TLSCAFile: f + ".nope"}, "WR_REDIS_TLS_CA_FILE"},
		{"user without password", config.Redis{Addr: "a:1", Username: "u"}, "needs WR_REDIS_PASSWORD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.Validate()
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestRedisPasswordsAreMasked(t *testing.T) {
	t.Setenv("WR_REDIS_MODE", "cluster")
	t.Setenv("WR_REDIS_ADDRS", "a:6379,b:6379")
	t.Setenv("WR_REDIS_USERNAME", "waitroom")
	t.Setenv("WR_REDIS_PASSWORD", "redis-hunter2")
	t.Setenv("WR_REDIS_TLS", "true")
	c, err := config.Load[svc]()
	require.NoError(t, err)
	assert.Equal(t, []string{"a:6379", "b:6379"}, c.Redis.Endpoints())
	enc := zapcore.NewMapObjectEncoder()
	config.Field(c).AddTo(enc)
	b, err := json.Marshal(enc.Fields)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "redis-hunter2")
	assert.Contains(t, string(b), `"WR_REDIS_PASSWORD":"***"`)
	assert.Contains(t, string(b), `"WR_REDIS_USERNAME":"waitroom"`)

	t.Setenv("WR_REDIS_MODE", "sentinel")
	_, err = config.Load[svc]()
	require.ErrorContains(t, err, "WR_REDIS_SENTINEL_MASTER", "Load validates the Redis settings")
}
