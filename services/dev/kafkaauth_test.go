package main

import (
	"context"
	"encoding/base64"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
)

// TestWrongKafkaPasswordStopsEveryService builds each service and starts it as
// a deployment would, against a TLS + SASL/SCRAM Kafka with a wrong password:
// each must stop at start (exit 1) and end with one line naming the refused
// mechanism and user, never the password.
func TestWrongKafkaPasswordStopsEveryService(t *testing.T) {
	k := testenv.SecureKafka(t, config.SASLScram256)
	rds := testenv.StartRedis(t)
	bin := t.TempDir()
	env := []string{
		"WR_KAFKA_BROKERS=" + strings.Join(k.Brokers, ","),
		"WR_KAFKA_TLS=true", "WR_KAFKA_TLS_CA_FILE=" + k.Security.TLSCAFile,
		"WR_KAFKA_SASL_MECHANISM=SCRAM-SHA-256", "WR_KAFKA_SASL_USERNAME=" + testenv.KafkaUser,
		"WR_KAFKA_SASL_PASSWORD=Pw-that-is-wrong-42",
		"WR_REDIS_ADDR=" + rds.Addr,
		"WR_TOKEN_KEY=" + strings.Repeat("k", 32),
		"WR_ADMISSION_KEY=" + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("a", 32))),
		"WR_API_ADDR=127.0.0.1:0", "WR_CONSUMER_ADDR=127.0.0.1:0", "WR_SCHEDULER_ADDR=127.0.0.1:0", "WR_NOTIFIER_ADDR=127.0.0.1:0",
	}
	for _, svc := range []string{"api", "consumer", "scheduler", "notifier"} {
		t.Run(svc, func(t *testing.T) {
			exe := filepath.Join(bin, "waitroom-"+svc)
			out, err := exec.Command("go", "build", "-o", exe, "github.com/waitroom/waitroom/services/"+svc).CombinedOutput()
			require.NoError(t, err, "go build: %s", out)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, exe)
			cmd.Env = env
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err = cmd.Run()
			require.NoError(t, ctx.Err(), "%s kept running with a refused password", svc)
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "started with a wrong password: %v\n%s", err, stderr.String())
			assert.Equal(t, 1, exit.ExitCode())
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			last := lines[len(lines)-1]
			assert.True(t, strings.HasPrefix(last, "waitroom-"+svc+": kafka refused our credentials"), last)
			assert.Contains(t, last, "SASL SCRAM-SHA-256 as user "+testenv.KafkaUser)
			assert.NotContains(t, stderr.String()+stdout.String(), "Pw-that-is-wrong-42", "the password is masked in the config log too")
			assert.Contains(t, stderr.String()+stdout.String(), `"WR_KAFKA_SASL_PASSWORD":"***"`, "the config log shows it is set")
		})
	}
}
