package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// layout is a cluster's processes without starting any: Sentinel mode's
// Redis when sentinel, and the default replicas of each service.
func layout(sentinel bool) *Cluster {
	c := &Cluster{Kafka: &Proc{Name: "kafka", Kind: "kafka"}, Redis: &Proc{Name: "redis", Kind: "redis"}, Front: &Proc{Name: "front", Kind: "front"}}
	if sentinel {
		c.Replica = &Proc{Name: "redis-replica", Kind: "redis"}
		for i := range 3 {
			c.Sentinels = append(c.Sentinels, &Proc{Name: "sentinel-" + string(rune('1'+i)), Kind: "sentinel"})
		}
	}
	kinds := map[string]*[]*Proc{"api": &c.APIs, "consumer": &c.Consumers, "scheduler": &c.Schedulers, "notifier": &c.Notifiers}
	for kind, n := range map[string]int{"api": 2, "consumer": 2, "scheduler": 3, "notifier": 2} {
		for i := range n {
			*kinds[kind] = append(*kinds[kind], &Proc{Name: kind + "-" + string(rune('1'+i)), Kind: kind})
		}
	}
	return c
}

// Whichever zone dies, what is left serves: a replica of every service,
// a Redis node, and two of the three Sentinels (a quorum of 2 and a
// majority, so they can fail over); the primary and its replica never
// share a zone. Kafka, the front door and a lone Redis are in no zone.
func TestEitherZoneLostLeavesEveryKindAndASentinelMajority(t *testing.T) {
	for _, sentinel := range []bool{false, true} {
		c := layout(sentinel)
		if sentinel && c.Zone(c.Redis) == c.Zone(c.Replica) {
			t.Errorf("the primary and the replica share zone %q", c.Zone(c.Redis))
		}
		for _, p := range []*Proc{c.Kafka, c.Front} {
			if z := c.Zone(p); z != "" {
				t.Errorf("%s in zone %q, want none", p.Name, z)
			}
		}
		if !sentinel && c.Zone(c.Redis) != "" {
			t.Errorf("the lone redis in zone %q, want none", c.Zone(c.Redis))
		}
		for _, z := range Zones {
			lost := c.InZone(z)
			if len(lost) == 0 {
				t.Fatalf("sentinel=%v: zone %s holds nothing", sentinel, z)
			}
			left := map[string]int{}
			for _, p := range c.All() {
				if !slices.Contains(lost, p) {
					left[p.Kind]++
				}
			}
			for _, kind := range []string{"api", "consumer", "scheduler", "notifier", "kafka", "front", "redis"} {
				if left[kind] == 0 {
					t.Errorf("sentinel=%v: zone %s lost, no %s left", sentinel, z, kind)
				}
			}
			if sentinel && left["sentinel"] < 2 {
				t.Errorf("zone %s lost: %d Sentinels left, want 2 of 3", z, left["sentinel"])
			}
		}
	}
}

// KillZone kills every process of the zone, and only those.
func TestKillZoneKillsTheZoneAndNothingElse(t *testing.T) {
	c := layout(false)
	for _, p := range c.Services() {
		p.Bin, p.Args, p.LogFile = "sleep", []string{"60"}, filepath.Join(t.TempDir(), p.Name+".log")
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Stop(time.Second) })
	}
	killed, err := c.KillZone("a")
	if err != nil {
		t.Fatal(err)
	}
	if want := c.InZone("a"); !slices.Equal(killed, want) {
		t.Errorf("killed %d processes, want the %d of zone a", len(killed), len(want))
	}
	for _, p := range c.Services() {
		if dead, inA := !p.Running(), c.Zone(p) == "a"; dead != inA {
			t.Errorf("%s (zone %s): running %v after zone a was killed", p.Name, c.Zone(p), !dead)
		}
	}
	if _, err := c.KillZone(ZoneWitness); err == nil {
		t.Error("killing an empty zone: no error")
	}
}

// A Redis node rejoining is started without its old --replicaof; a
// Sentinel's config is pointed at the primary of now, its id and the
// Sentinels it knew kept, the replicas it knew dropped.
func TestRejoinConfigFollowsTheSentinelsPrimary(t *testing.T) {
	args := []string{"--port", "1", "--replicaof", "127.0.0.1", "2", "--appendonly", "yes"}
	if got := withoutReplicaOf(args); !slices.Equal(got, []string{"--port", "1", "--appendonly", "yes"}) {
		t.Errorf("withoutReplicaOf = %q", got)
	}
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	before := "port 3\nsentinel monitor waitroom 127.0.0.1 23079 2\nsentinel myid abc\n" +
		"sentinel known-replica waitroom 127.0.0.1 23078\nsentinel known-sentinel waitroom 127.0.0.1 23071 def\n"
	if err := os.WriteFile(conf, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := watchPrimary(conf, "127.0.0.1", "23078"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(conf)
	got := string(b)
	for _, want := range []string{"sentinel monitor waitroom 127.0.0.1 23078 2\n", "sentinel myid abc\n", "known-sentinel waitroom 127.0.0.1 23071 def"} {
		if !strings.Contains(got, want) {
			t.Errorf("config lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "known-replica") || strings.Contains(got, "23079") {
		t.Errorf("config still names the old primary:\n%s", got)
	}
}
