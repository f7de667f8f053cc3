package chaos

import (
	"slices"
	"strings"
	"testing"

	"github.com/waitroom/waitroom/services/dev/cluster"
)

// A lost item's line after its rebuild: those who waited keep their order,
// newcomers queue behind them, and whoever left was admitted.
func TestKeptOrder(t *testing.T) {
	admitted := map[string]bool{"a": true}
	for _, tc := range []struct {
		name          string
		before, after []string
		want          string // a part of the complaint; "": none
	}{
		{"same line", []string{"a", "b", "c"}, []string{"a", "b", "c"}, ""},
		{"newcomers behind", []string{"b", "c"}, []string{"b", "c", "x", "y"}, ""},
		{"the first admitted", []string{"a", "b"}, []string{"b", "x"}, ""},
		{"nobody waited", nil, []string{"x"}, ""},
		{"a newcomer ahead", []string{"b", "c"}, []string{"x", "b", "c"}, "behind someone who came after"},
		{"swapped", []string{"b", "c"}, []string{"c", "b"}, "another order"},
		{"gone, not admitted", []string{"b", "c"}, []string{"c"}, "neither waiting nor admitted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := keptOrder(tc.before, tc.after, admitted)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("keptOrder(%v, %v) = %q, want %q", tc.before, tc.after, got, tc.want)
			}
		})
	}
}

// The node-loss faults need a Redis Cluster; with one, the single Redis's
// faults are left out by default and refused by name.
func TestTheNodeLossFaultsNeedARedisCluster(t *testing.T) {
	names := func(fs []Fault) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.Name)
		}
		return out
	}
	single, err := pickFor(nil, cluster.Options{})
	if err != nil || slices.Contains(names(single), NodeEmpty) {
		t.Fatalf("default faults with a single Redis: %v %v", err, names(single))
	}
	if _, err := pickFor([]string{NodeEmpty}, cluster.Options{}); err == nil {
		t.Fatal("redis-node-empty named with a single Redis was accepted")
	}
	rc, err := pickFor(nil, cluster.Options{RedisCluster: true})
	if err != nil {
		t.Fatal(err)
	}
	got := names(rc)
	for _, n := range []string{NodeEmpty, EpochNodeEmpty, "api", "kafka"} {
		if !slices.Contains(got, n) {
			t.Fatalf("default faults with a Redis Cluster lack %s: %v", n, got)
		}
	}
	for _, n := range []string{"redis-aof", "redis-empty", "consumer-cut", Failover} {
		if slices.Contains(got, n) {
			t.Fatalf("default faults with a Redis Cluster have %s: %v", n, got)
		}
	}
	if _, err := pickFor([]string{"redis-empty"}, cluster.Options{RedisCluster: true}); err == nil {
		t.Fatal("redis-empty named with a Redis Cluster was accepted")
	}
	fs, err := pickFor([]string{EpochNodeEmpty, "api"}, cluster.Options{RedisCluster: true})
	if err != nil || !slices.Equal(names(fs), []string{EpochNodeEmpty, "api"}) {
		t.Fatalf("named faults with a Redis Cluster: %v %v", err, names(fs))
	}
}
