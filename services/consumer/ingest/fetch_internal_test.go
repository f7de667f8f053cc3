package ingest

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/config"
)

// The registrations consumer fetches at most WR_CONSUMER_FETCH_MAX_BYTES per
// broker and WR_CONSUMER_FETCH_MAX_PARTITION_BYTES per partition (1 MiB each
// by default, not franz-go's 50 MiB per broker), so a backlog after a fault
// holds a bounded buffer; a config built by hand (zero) takes the defaults,
// and a negative bound is refused.
func TestTheRegistrationsConsumerBoundsItsFetches(t *testing.T) {
	def, err := config.Defaults[Config]()
	if err != nil {
		t.Fatal(err)
	}
	base := []kgo.Opt{kgo.SeedBrokers("127.0.0.1:27001")} // never dialled: clients connect lazily
	for _, tc := range []struct {
		name            string
		fetch, part     int32
		wantFetch, want int32
	}{
		{"defaults", def.FetchMaxBytes, def.FetchMaxPartitionBytes, 1 << 20, 1 << 20},
		{"built by hand", 0, 0, defaultFetchMaxBytes, defaultFetchMaxPartitionBytes},
		{"set", 4 << 20, 256 << 10, 4 << 20, 256 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			regs, items, err := groupConsumers(Config{Group: "g", ItemsGroup: "i", FetchMaxBytes: tc.fetch, FetchMaxPartitionBytes: tc.part}, base)
			if err != nil {
				t.Fatal(err)
			}
			defer regs.Close()
			defer items.Close()
			if got, gotPart := regs.OptValue(kgo.FetchMaxBytes), regs.OptValue(kgo.FetchMaxPartitionBytes); got != tc.wantFetch || gotPart != tc.want {
				t.Fatalf("registrations consumer fetches %v per broker, %v per partition; want %d, %d", got, gotPart, tc.wantFetch, tc.want)
			}
		})
	}
	def.FetchMaxBytes = -1
	def.Kafka.Brokers = []string{"127.0.0.1:27001"}
	if err := def.Validate(); err == nil {
		t.Fatal("a negative WR_CONSUMER_FETCH_MAX_BYTES was accepted")
	}
}
