package ingest_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// A partition handed to another member of the group leaves this member's
// lag with it: a series left at its last value would be summed beside the
// new holder's for ever (WaitroomConsumerLagGrowing, the dashboard's lag).
func TestRevokedPartitionsLeaveTheLag(t *testing.T) {
	items := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	p := newPipeline(t, 2, items...)
	first := p.startOn(t, "127.0.0.1:26551")
	var recs []*kgo.Record
	for _, it := range items {
		recs = append(recs, register(it, "u-"+it))
	}
	parts := map[int32]bool{}
	for _, r := range p.produce(recs) {
		parts[r.Partition] = true
	}
	require.Len(t, parts, 2, "the items' registrations span both partitions")
	require.Eventually(t, func() bool { return lagSeries(t, first) == 2 }, 20*time.Second, 50*time.Millisecond,
		"the only member reports both partitions' lag")
	p.startOn(t, "127.0.0.1:26552")
	require.Eventually(t, func() bool { return lagSeries(t, first) == 1 }, 30*time.Second, 100*time.Millisecond,
		"after the rebalance the first member reports only the partition it still holds")
}

// startOn runs another member of the consumer group, its /metrics on addr,
// until the test ends, and returns its address.
func (p *pipeline) startOn(t *testing.T, addr string) string {
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))
	go func() { done <- ingest.Run(ctx, p.cfg, ln, log, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
	return "http://" + addr
}

// lagSeries counts the registrations lag series a member exports.
func lagSeries(t *testing.T, base string) int {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "waitroom_consumer_lag_records{") && strings.Contains(line, `topic="`+topics.Registrations+`"`) {
			n++
		}
	}
	return n
}
