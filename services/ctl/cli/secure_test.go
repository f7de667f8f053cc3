package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
)

// secureEnv is the environment a user sets for a TLS + SASL Kafka.
func secureEnv(k config.Kafka) []string {
	s := k.Security
	return []string{
		"WR_KAFKA_BROKERS=" + strings.Join(k.Brokers, ","),
		"WR_KAFKA_TLS=true", "WR_KAFKA_TLS_CA_FILE=" + s.TLSCAFile,
		"WR_KAFKA_SASL_MECHANISM=" + s.SASLMechanism,
		"WR_KAFKA_SASL_USERNAME=" + s.SASLUsername, "WR_KAFKA_SASL_PASSWORD=" + s.SASLPassword,
	}
}

func TestTopicsOnASecuredKafka(t *testing.T) {
	k := testenv.SecureKafka(t, config.SASLScram512)
	env := secureEnv(k)

	r := runBin(t, env, "topics", "ensure")
	require.Equal(t, ExitOK, r.code, r)
	assert.Contains(t, r.stdout, "healthy: 8 topics match the contract")
	r = runBin(t, env, "topics", "check")
	require.Equal(t, ExitOK, r.code, r)

	// A wrong password: one clear line naming the mechanism and user, never the password.
	bad := append(append([]string{}, env...), "WR_KAFKA_SASL_PASSWORD=Qz-not-the-one")
	r = runBin(t, bad, "topics", "check")
	require.Equal(t, ExitFailure, r.code, r)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	require.Len(t, lines, 1, r)
	assert.Contains(t, lines[0], "kafka refused our credentials")
	assert.Contains(t, lines[0], "SASL SCRAM-SHA-512 as user "+testenv.KafkaUser)
	assert.NotContains(t, lines[0], "Qz-not-the-one")

	// Settings that cannot work are refused before anything runs.
	r = runBin(t, append(append([]string{}, env...), "WR_KAFKA_SASL_MECHANISM=GSSAPI"), "topics", "check")
	require.Equal(t, ExitUsage, r.code, r)
	assert.Contains(t, r.stderr, `WR_KAFKA_SASL_MECHANISM "GSSAPI"`)
}
