package ingest

import (
	"testing"
	"time"

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
			regs, _ := clients(t, Config{Group: "g", ItemsGroup: "i", FetchMaxBytes: tc.fetch, FetchMaxPartitionBytes: tc.part})
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

// By default the registrations consumer has the broker gather 16 KiB or
// 20 ms of records into a fetch (a batch's fixed cost shared by more
// records); set to 1 it fetches as soon as one record is there, as a config
// built by hand does. The items consumer never waits for more. A wait under
// franz-go's least (10 ms), or a minimum above the fetch's bound, is refused.
func TestTheRegistrationsConsumerGathersItsBatches(t *testing.T) {
	def, err := config.Defaults[Config]()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		min      int32
		wait     time.Duration
		wantMin  int32
		wantWait time.Duration
	}{
		{"defaults", def.FetchMinBytes, def.FetchWait, 16 << 10, 20 * time.Millisecond},
		{"built by hand", 0, 0, 1, 100 * time.Millisecond},
		{"off", 1, def.FetchWait, 1, 100 * time.Millisecond},
		{"set", 64 << 10, 50 * time.Millisecond, 64 << 10, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			regs, items := clients(t, Config{Group: "g", ItemsGroup: "i", FetchMinBytes: tc.min, FetchWait: tc.wait})
			if got, wait := regs.OptValue(kgo.FetchMinBytes), regs.OptValue(kgo.FetchMaxWait); got != tc.wantMin || wait != tc.wantWait {
				t.Fatalf("registrations consumer waits for %v bytes or %v; want %d or %s", got, wait, tc.wantMin, tc.wantWait)
			}
			if got, wait := items.OptValue(kgo.FetchMinBytes), items.OptValue(kgo.FetchMaxWait); got != int32(1) || wait != 100*time.Millisecond {
				t.Fatalf("items consumer waits for %v bytes or %v; want 1 or 100ms", got, wait)
			}
		})
	}
	def.Kafka.Brokers = []string{"127.0.0.1:27001"}
	if err := def.Validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	for _, bad := range []func(c *Config){
		func(c *Config) { c.FetchWait = 5 * time.Millisecond },
		func(c *Config) { c.FetchWait = 2 * time.Second },
		func(c *Config) { c.FetchMinBytes = c.FetchMaxBytes + 1 },
		func(c *Config) { c.FetchMinBytes = -1 },
	} {
		c := def
		bad(&c)
		if err := c.Validate(); err == nil {
			t.Fatalf("min bytes %d and wait %s were accepted", c.FetchMinBytes, c.FetchWait)
		}
	}
}

// clients are the two group consumers groupConsumers builds from cfg, closed
// when the test ends (never dialled: clients connect lazily).
func clients(t *testing.T, cfg Config) (regs, items *kgo.Client) {
	t.Helper()
	regs, items, err := groupConsumers(cfg, []kgo.Opt{kgo.SeedBrokers("127.0.0.1:27001")}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(regs.Close)
	t.Cleanup(items.Close)
	return regs, items
}
