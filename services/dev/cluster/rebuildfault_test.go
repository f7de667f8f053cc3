package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// rebuildFaultPeople is the line TestRebuildThroughLinkFaults rebuilds.
const rebuildFaultPeople = 15000

// linkFault is one of the nemesis's link faults, as inflict does it, on
// some links: on starts it, off ends it.
type linkFault struct {
	name    string
	on, off func()
}

// linkFaults are the nemesis's faults on links, each a linkFault of the
// links f is applied to.
func linkFaults(ls ...*Link) []linkFault {
	each := func(f func(*Link)) func() {
		return func() {
			for _, l := range ls {
				f(l)
			}
		}
	}
	set := func(t Toxics) func() { return each(func(l *Link) { l.Set(t) }) }
	none := func() {}
	return []linkFault{
		{"none", none, none},
		{"squeeze 5000 B/s", set(Toxics{Rate: 5000}), set(Toxics{})},
		{"slow 333ms", set(Toxics{Latency: 333 * time.Millisecond}), set(Toxics{})},
		{"timeout", each((*Link).Hold), each(func(l *Link) { l.Reset(); l.Heal() })},
		{"reset", each((*Link).Reset), none},
		{"partition", each((*Link).Cut), each((*Link).Heal)},
		{"none", none, none},
	}
}

// TestRebuildThroughLinkFaults rebuilds a line of 15,000 people while one
// link fault of the nemesis, 3 s long, spoils the rebuilder's link to Kafka,
// then its links to Redis and the Sentinel (a failover client, as the
// consumer's), from the rebuild's start or 150 ms into it. Each rebuild that
// succeeds rebuilt the whole line; a partition may fail it (it is tried
// again by the consumer). It logs how long each took, by phase, beside a
// rebuild without a fault: the question of the Sentinel seed's 10-54 s
// rebuilds (RELIABILITY.md, session 8). Opt in with WR_REBUILD_FAULTS=1
// (about 3 minutes).
func TestRebuildThroughLinkFaults(t *testing.T) {
	if os.Getenv("WR_REBUILD_FAULTS") == "" {
		t.Skip("opt in with WR_REBUILD_FAULTS=1")
	}
	seeds := testenv.Kafka(t, 3)
	sr := testenv.StartSentinel(t)
	produceLine(t, seeds, rebuildFaultPeople)
	kl := proxy(t, seeds[0])
	pl, sl := proxy(t, sr.Primary.Addr), proxy(t, sr.Sentinel.Addr)
	via := map[string]*Link{seeds[0]: kl, sr.Primary.Addr: pl, sr.Sentinel.Addr: sl}
	var dials atomic.Int64
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		if l, ok := via[addr]; ok {
			addr = l.Addr()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testenv.SentinelMaster,
		SentinelAddrs: []string{sr.Sentinel.Addr}, Dialer: dial})
	t.Cleanup(func() { _ = rdb.Close() })
	// kfake's one broker advertises seeds[0]: every Kafka connection takes kl.
	rb := rebuild.New(rdb, []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.Dialer(dial)}, zap.NewNop())
	direct := sr.Primary.Client()
	for _, side := range []struct {
		name  string
		links []*Link
	}{{"kafka", []*Link{kl}}, {"redis+sentinel", []*Link{pl, sl}}} {
		for _, f := range linkFaults(side.links...) {
			for _, delay := range []time.Duration{0, 150 * time.Millisecond} {
				d0 := dials.Load()
				rep, err := rebuildDuring(t, rb, f, delay, 3*time.Second)
				_ = direct.Del(context.Background(), view.LockKey).Err() // a failed rebuild's lock
				t.Logf("%s %-16s at %v: took %v (read %v, fence %v, write %v), %d records, %d dials, err %v", side.name, f.name, delay,
					rep.Took.Round(10*time.Millisecond), rep.ReadTook.Round(10*time.Millisecond), rep.FenceTook.Round(10*time.Millisecond),
					rep.WriteTook.Round(10*time.Millisecond), rep.Records, dials.Load()-d0, firstLine(err))
				if err != nil {
					if f.name != "partition" {
						t.Errorf("%s %s: %v", side.name, f.name, err)
					}
					continue
				}
				if st, err := queue.New(direct).Stats(context.Background(), "big"); err != nil || st.Waiting != rebuildFaultPeople {
					t.Errorf("%s %s: rebuilt %d waiting (%v), want %d", side.name, f.name, st.Waiting, err, rebuildFaultPeople)
				}
			}
		}
	}
}

// rebuildDuring runs a rebuild with f started delay after its start and
// ended d later, and waits for f's end.
func rebuildDuring(t *testing.T, rb *rebuild.Rebuilder, f linkFault, delay, d time.Duration) (rebuild.Report, error) {
	t.Helper()
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		time.Sleep(delay)
		f.on()
		defer f.off()
		select {
		case <-time.After(d):
		case <-done:
			time.Sleep(d) // the fault lasts d, as the nemesis's does
		}
	}()
	rep, err := rb.Run(context.Background(), rebuild.Options{Settle: time.Millisecond})
	close(done)
	<-ended
	return rep, err
}

// proxy is a Link to target on a free loopback port, closed when t ends.
func proxy(t *testing.T, target string) *Link {
	t.Helper()
	l, err := NewProxy("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// produceLine produces one item, "big", and n registrations to it.
func produceLine(t *testing.T, seeds []string, n int) {
	t.Helper()
	ctx := context.Background()
	kc, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	it := topics.ItemState{V: 1, ItemID: "big", Name: "big", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 100, SessionTTLSeconds: 600}}
	if err := kc.ProduceSync(ctx, &kgo.Record{Topic: topics.Items, Key: []byte("big"), Value: topics.Encode(&it)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	for i := range n {
		ev := topics.RegistrationEvent{V: 1, Kind: topics.KindRegister, ItemID: "big", UserID: fmt.Sprintf("user-%07d", i),
			TokenID: fmt.Sprintf("TOKEN%021d", i), RequestedAt: now}
		kc.Produce(ctx, &kgo.Record{Topic: topics.Registrations, Key: []byte("big"), Value: topics.Encode(&ev)}, nil)
	}
	if err := kc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// firstLine is err's first line (a failed fence joins one error per id).
func firstLine(err error) string {
	if err == nil {
		return "none"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
