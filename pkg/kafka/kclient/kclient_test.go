package kclient_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"go.uber.org/zap"
)

// roundTrip creates a topic, produces a record and reads it back with the
// options of k: the proof that the settings work, not only that they parse.
func roundTrip(t *testing.T, k config.Kafka) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts, err := kclient.Opts(ctx, k, "test", zap.NewNop())
	require.NoError(t, err)
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, kclient.Check(ctx, cl, k))
	_, err = kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "secured")
	require.NoError(t, err)
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "secured", Value: []byte("hello")}).FirstErr())

	rd, err := kgo.NewClient(append(opts, kgo.ConsumeTopics("secured"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	require.NoError(t, err)
	defer rd.Close()
	fs := rd.PollFetches(ctx)
	require.NoError(t, fs.Err0())
	recs := fs.Records()
	require.Len(t, recs, 1)
	assert.Equal(t, "hello", string(recs[0].Value))
}

func TestSecuredKafkaAcceptsEachMechanism(t *testing.T) {
	for _, m := range []string{config.SASLPlain, config.SASLScram256, config.SASLScram512} {
		t.Run(m, func(t *testing.T) { roundTrip(t, testenv.SecureKafka(t, m)) })
	}
}

func TestWrongPasswordIsOneClearStartUpError(t *testing.T) {
	for _, m := range []string{config.SASLPlain, config.SASLScram256, config.SASLScram512} {
		t.Run(m, func(t *testing.T) {
			k := testenv.SecureKafka(t, m)
			k.Security.SASLPassword = "Xy-not-it-77"
			ctx := context.Background()
			opts, err := kclient.Opts(ctx, k, "test", zap.NewNop())
			require.NoError(t, err)
			cl, err := kgo.NewClient(opts...)
			require.NoError(t, err)
			defer cl.Close()
			err = kclient.Check(ctx, cl, k)
			require.ErrorIs(t, err, kclient.ErrAuth)
			assert.Contains(t, err.Error(), "with SASL "+m+" as user "+testenv.KafkaUser)
			assert.NotContains(t, err.Error(), "Xy-not-it-77", "the password must not be printed")
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestTLSWithoutTheCAIsRefused(t *testing.T) {
	k := testenv.SecureKafka(t, config.SASLScram256)
	k.Security.TLSCAFile = "" // the system's roots do not know the test CA
	ctx := context.Background()
	opts, err := kclient.Opts(ctx, k, "test", zap.NewNop())
	require.NoError(t, err)
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer cl.Close()
	err = kclient.Check(ctx, cl, k)
	require.ErrorIs(t, err, kclient.ErrAuth)
	assert.Contains(t, err.Error(), "over TLS")
	assert.Contains(t, err.Error(), "certificate")
}

func TestServerNameIsChecked(t *testing.T) {
	k := testenv.SecureKafka(t, config.SASLScram512)
	k.Security.TLSServerName = "localhost" // in the certificate
	roundTrip(t, k)

	k.Security.TLSServerName = "kafka.example.com" // not in it
	ctx := context.Background()
	opts, err := kclient.Opts(ctx, k, "test", zap.NewNop())
	require.NoError(t, err)
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer cl.Close()
	require.ErrorIs(t, kclient.Check(ctx, cl, k), kclient.ErrAuth)
}

func TestUnreachableKafkaIsNotAnAuthError(t *testing.T) {
	k := config.Kafka{Brokers: []string{"127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))}}
	ctx := context.Background()
	opts, err := kclient.Opts(ctx, k, "test", zap.NewNop())
	require.NoError(t, err)
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer cl.Close()
	assert.NoError(t, kclient.Check(ctx, cl, k), "the clients retry an unreachable Kafka themselves")
}

func TestClientCertificateIsLoaded(t *testing.T) {
	dir := t.TempDir()
	cert, key := testenv.ClientCert(t, dir)
	tc, err := kclient.TLSConfig(config.KafkaSecurity{TLS: true, TLSCertFile: cert, TLSKeyFile: key, TLSServerName: "kafka"})
	require.NoError(t, err)
	require.Len(t, tc.Certificates, 1)
	assert.Equal(t, "kafka", tc.ServerName)

	_, err = kclient.TLSConfig(config.KafkaSecurity{TLS: true, TLSCertFile: key, TLSKeyFile: cert})
	require.ErrorContains(t, err, "WR_KAFKA_TLS_CERT_FILE")
	_, err = kclient.TLSConfig(config.KafkaSecurity{TLS: true, TLSCAFile: key})
	require.ErrorContains(t, err, "no PEM certificate")
}

func TestOAuthTokenFromFileAndCommand(t *testing.T) {
	ctx := context.Background()
	f := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(f, []byte("tok-1\n"), 0o600))
	s := config.KafkaSecurity{SASLMechanism: config.SASLOAuthBearer, OAuthTokenFile: f}
	tok, err := kclient.OAuthToken(ctx, s)
	require.NoError(t, err)
	assert.Equal(t, "tok-1", tok)
	require.NoError(t, os.WriteFile(f, []byte("tok-2"), 0o600)) // rotated by a sidecar
	tok, err = kclient.OAuthToken(ctx, s)
	require.NoError(t, err)
	assert.Equal(t, "tok-2", tok)

	s = config.KafkaSecurity{SASLMechanism: config.SASLOAuthBearer, OAuthTokenCommand: "echo '  tok-3 '"}
	tok, err = kclient.OAuthToken(ctx, s)
	require.NoError(t, err)
	assert.Equal(t, "tok-3", tok)

	s.OAuthTokenCommand = "exit 3"
	_, err = kclient.OAuthToken(ctx, s)
	require.ErrorContains(t, err, "WR_KAFKA_SASL_OAUTH_TOKEN_COMMAND")
	s.OAuthTokenCommand = "true"
	_, err = kclient.OAuthToken(ctx, s)
	require.ErrorContains(t, err, "empty")
}

func TestEveryMechanismBuilds(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	ctx := context.Background()
	for _, s := range []config.KafkaSecurity{
		{SASLMechanism: config.SASLPlain, SASLUsername: "u", SASLPassword: "p"},
		{SASLMechanism: "scram-sha-256", SASLUsername: "u", SASLPassword: "p"},
		{SASLMechanism: config.SASLScram512, SASLUsername: "u", SASLPassword: "p"},
		{SASLMechanism: config.SASLOAuthBearer, OAuthTokenCommand: "echo t"},
		{SASLMechanism: config.SASLAWSMSKIAM, AWSRegion: "eu-west-1"},
	} {
		m, err := kclient.Mechanism(ctx, s)
		require.NoError(t, err, s.SASLMechanism)
		assert.Equal(t, strings.ToUpper(s.SASLMechanism), m.Name())
	}
}
