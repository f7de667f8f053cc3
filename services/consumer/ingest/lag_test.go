package ingest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
)

// A partition handed to another member of the group leaves this member's
// lag with it: a series left at its last value would be summed beside the
// new holder's for ever (WaitroomConsumerLagGrowing, the dashboard's lag).
func TestRevokedPartitionsLeaveTheLag(t *testing.T) {
	items := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	p := newPipeline(t, 2, items...)
	first := p.member()
	var recs []*kgo.Record
	for _, it := range items {
		recs = append(recs, register(it, "u-"+it))
	}
	parts := map[int32]bool{}
	for _, r := range p.produce(recs) {
		parts[r.Partition] = true
	}
	require.Len(t, parts, 2, "the items' registrations span both partitions")
	require.Eventually(t, func() bool { return lagSeries(first) == 2 }, 20*time.Second, 50*time.Millisecond,
		"the only member reports both partitions' lag")
	p.member()
	require.Eventually(t, func() bool { return lagSeries(first) == 1 }, 30*time.Second, 100*time.Millisecond,
		"after the rebalance the first member reports only the partition it still holds")
}

// lagSeries counts the registrations lag series a member exports.
func lagSeries(base string) int {
	b, err := metricsOf(base)
	if err != nil {
		return -1
	}
	n := 0
	for _, line := range strings.Split(b, "\n") {
		if strings.HasPrefix(line, "waitroom_consumer_lag_records{") && strings.Contains(line, `topic="`+topics.Registrations+`"`) {
			n++
		}
	}
	return n
}
