package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/waitroom/waitroom/topics"
)

// emptyKafka starts an in-process Kafka with no topics and returns its seed brokers.
func emptyKafka(t *testing.T) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return strings.Join(c.ListenAddrs(), ",")
}

// rows parses the topics table into topic → "state | problems".
func rows(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.GreaterOrEqual(t, len(lines), 2, out)
	require.Regexp(t, `^TOPIC\s+STATE\s+PROBLEMS$`, lines[0])
	row := regexp.MustCompile(`^(\S+)\s+(\S+)\s+(.+)$`)
	got := map[string]string{}
	for _, l := range lines[1 : len(lines)-1] {
		m := row.FindStringSubmatch(l)
		require.NotNil(t, m, "table row %q", l)
		got[m[1]] = m[2] + " | " + m[3]
	}
	return got
}

func allTopics() []string {
	var names []string
	for _, s := range topics.Specs(topics.DefaultOptions()) {
		names = append(names, s.Name)
	}
	return names
}

func TestTopicsEnsureThenCheck(t *testing.T) {
	brokers := emptyKafka(t)

	code, out, stderr := run(t, "topics", "check", "--brokers", brokers)
	require.Equal(t, ExitFailure, code, "check of an empty cluster must fail; stdout:\n%s\nstderr:\n%s", out, stderr)
	got := rows(t, out)
	require.Len(t, got, 8, out)
	for _, name := range allTopics() {
		assert.Equal(t, "missing | topic does not exist", got[name], name)
	}
	assert.Contains(t, out, "NOT healthy: 8 of 8 topics differ from the contract")
	assert.Contains(t, stderr, ErrUnhealthy.Error())

	code, out, stderr = run(t, "topics", "ensure", "--brokers", brokers)
	require.Equal(t, ExitOK, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	got = rows(t, out)
	for _, name := range allTopics() {
		assert.Equal(t, "created | -", got[name], name)
	}
	assert.Contains(t, out, "healthy: 8 topics match the contract")

	code, out, stderr = run(t, "topics", "check", "--brokers", brokers)
	require.Equal(t, ExitOK, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	got = rows(t, out)
	for _, name := range allTopics() {
		assert.Equal(t, "ok | -", got[name], name)
	}

	// A second ensure changes nothing.
	code, out, _ = run(t, "topics", "ensure", "--brokers", brokers)
	require.Equal(t, ExitOK, code, out)
	assert.Equal(t, "ok | -", rows(t, out)[topics.Registrations])

	// A contract asking for other partition counts is a mismatch, for check and ensure alike.
	for _, verb := range []string{"check", "ensure"} {
		code, out, _ = run(t, "topics", verb, "--brokers", brokers, "--partitions", "6")
		require.Equal(t, ExitFailure, code, out)
		got = rows(t, out)
		assert.Equal(t, "mismatch | has 12 partitions, contract says 6 (not changed: it would reorder items)", got[topics.Registrations])
		assert.Equal(t, "mismatch | has 12 partitions, contract says 6 (not changed: it would reorder items)", got[topics.Admissions])
		assert.Equal(t, "ok | -", got[topics.Items])
		assert.Contains(t, out, "NOT healthy: 2 of 8 topics differ from the contract")
	}

	code, out, _ = run(t, "-o", "json", "topics", "check", "--brokers", brokers)
	require.Equal(t, ExitOK, code, out)
	var rep struct {
		Healthy bool
		Topics  []topicRow
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.True(t, rep.Healthy)
	require.Len(t, rep.Topics, 8)
	assert.Equal(t, topicRow{Topic: topics.Registrations, State: "ok", Problems: []string{}}, rep.Topics[0])
}

func TestTopicsCheckUnreachableKafkaFails(t *testing.T) {
	code, _, stderr := run(t, "topics", "check", "--brokers", "127.0.0.1:1", "--timeout", "500ms")
	assert.Equal(t, ExitFailure, code)
	assert.Contains(t, stderr, "check topics on 127.0.0.1:1")
}
