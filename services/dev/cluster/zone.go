package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Zones of a cluster: the availability zones its processes are laid out in,
// as docs/zones.md deploys them. Replica i of each service is in zone
// Zones[i%2]. In Sentinel mode the first primary and sentinel-1 are in zone
// a, the replica and sentinel-2 in zone b, and sentinel-3 in ZoneWitness, a
// third zone that holds nothing else: with it, the Sentinels left when either
// zone dies are two of three, a quorum and a majority, and can fail over.
// Kafka (its three brokers are one process) and the front door are in no
// zone: they stand for services that span the zones. The services are not
// told their zone; nothing in them depends on it.
var Zones = []string{"a", "b"}

// ZoneWitness is the zone of the third Sentinel alone.
const ZoneWitness = "c"

// Zone is the zone p runs in ("" for Kafka and the front door).
func (c *Cluster) Zone(p *Proc) string {
	switch {
	case p == nil:
		return ""
	case p == c.Redis && c.Replica != nil:
		return Zones[0]
	case p == c.Replica:
		return Zones[1]
	}
	for i, s := range c.Sentinels {
		if p == s {
			return []string{Zones[0], Zones[1], ZoneWitness}[i%3]
		}
	}
	for _, g := range [][]*Proc{c.APIs, c.Consumers, c.Schedulers, c.Notifiers} {
		for i, q := range g {
			if p == q {
				return Zones[i%len(Zones)]
			}
		}
	}
	return ""
}

// InZone lists the processes of zone z, Redis and the Sentinels first (in
// start order, the order a restart needs).
func (c *Cluster) InZone(z string) []*Proc {
	var ps []*Proc
	for _, p := range c.All() {
		if p != nil && c.Zone(p) == z {
			ps = append(ps, p)
		}
	}
	return ps
}

// Layout is one line per zone naming its processes: "zone a: redis
// sentinel-1 consumer-1 …".
func (c *Cluster) Layout() string {
	var lines []string
	for _, z := range append(append([]string{}, Zones...), ZoneWitness, "") {
		var names []string
		for _, p := range c.InZone(z) {
			names = append(names, p.Name)
		}
		if len(names) == 0 {
			continue
		}
		label := "zone " + z
		if z == "" {
			label = "no zone"
		}
		lines = append(lines, label+": "+strings.Join(names, " "))
	}
	return strings.Join(lines, "\n")
}

// KillZone kills (-9) every process of zone z at once: each is signalled
// before any is waited for. It returns the processes it killed.
func (c *Cluster) KillZone(z string) ([]*Proc, error) {
	ps := c.InZone(z)
	if len(ps) == 0 {
		return nil, fmt.Errorf("kill zone %q: no process in it", z)
	}
	var errs []error
	var killed []*Proc
	for _, p := range ps {
		if err := p.signal(syscall.SIGKILL); err != nil {
			errs = append(errs, err)
			continue
		}
		killed = append(killed, p)
	}
	for _, p := range killed {
		<-p.Exited()
	}
	return killed, errors.Join(errs...)
}

// RestartZone starts ps again (as KillZone returned them): Redis and the
// Sentinels first, each waited for until ready, then every service at once,
// returning when all are ready. In Sentinel mode a Redis node
// comes back as a replica of the primary the Sentinels name now, and a
// Sentinel comes back watching that primary, as a Sentinel-aware start
// script does. Started as they were, after a failover, the old primary is a
// second primary holding the zone's stale data until the Sentinels' next
// INFO to it (every 10 s) converts it, and the old Sentinel names it to the
// clients that ask it first until it hears the others: the first run of the
// zone fault lost eight people that way.
func (c *Cluster) RestartZone(ctx context.Context, ps []*Proc) error {
	var services []*Proc
	for _, p := range ps {
		if p.Kind != "redis" && p.Kind != "sentinel" {
			services = append(services, p)
			continue
		}
		if err := c.rejoin(ctx, p); err != nil {
			return fmt.Errorf("restart %s of zone %s: %w", p.Name, c.Zone(p), err)
		}
	}
	// The services all at once, as an orchestrator starts a zone's pods.
	for _, p := range services {
		if err := p.Start(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for _, p := range services {
		if err := p.Ready(ctx); err != nil {
			return fmt.Errorf("restart %s of zone %s: %w", p.Name, c.Zone(p), err)
		}
	}
	return nil
}

// rejoin restarts p; a Redis node or Sentinel of Sentinel mode with the
// primary of now (see RestartZone).
func (c *Cluster) rejoin(ctx context.Context, p *Proc) error {
	if c.Replica == nil || (p.Kind != "redis" && p.Kind != "sentinel") {
		return c.Restart(ctx, p)
	}
	primary, err := c.survivingPrimary(ctx)
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		return fmt.Errorf("the Sentinels' primary %q: %w", primary, err)
	}
	if p.Kind == "sentinel" {
		if err := watchPrimary(p.Args[0], host, port); err != nil {
			return err
		}
		return c.Restart(ctx, p)
	}
	args := p.Args
	defer func() { p.Args = args }()
	p.Args = withoutReplicaOf(args)
	if primary != p.ReadyAddr {
		p.Args = append(p.Args, "--replicaof", host, port)
	}
	return c.Restart(ctx, p)
}

// survivingPrimary asks the running Sentinels, once each, which server is
// the primary (Primary also asks the zone's dead one, and its retries cost
// seconds).
func (c *Cluster) survivingPrimary(ctx context.Context) (string, error) {
	var errs []error
	for _, s := range c.Sentinels {
		if !s.Running() {
			continue
		}
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.ReadyAddr, DialTimeout: 500 * time.Millisecond, MaxRetries: -1})
		a, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		sc.Close()
		if err == nil && len(a) == 2 {
			return net.JoinHostPort(a[0], a[1]), nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
	}
	return "", fmt.Errorf("ask the running Sentinels for the primary: %w", errors.Join(errs...))
}

// withoutReplicaOf is args without a --replicaof and its two values.
func withoutReplicaOf(args []string) []string {
	out := make([]string, 0, len(args)+3)
	for i := 0; i < len(args); i++ {
		if args[i] == "--replicaof" {
			i += 2
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// watchPrimary points a Sentinel's config file at the primary host:port
// and drops the replicas it knew (it learns them from the primary); its id
// and the Sentinels it knew are kept.
func watchPrimary(conf, host, port string) error {
	b, err := os.ReadFile(conf)
	if err != nil {
		return fmt.Errorf("read the Sentinel's config: %w", err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 6 && f[0] == "sentinel" && f[1] == "monitor" && f[2] == SentinelMaster:
			l = strings.Join([]string{"sentinel", "monitor", SentinelMaster, host, port, f[5]}, " ")
		case len(f) >= 2 && f[0] == "sentinel" && f[1] == "known-replica":
			continue
		}
		lines = append(lines, l)
	}
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		return fmt.Errorf("write the Sentinel's config: %w", err)
	}
	return nil
}
