package view

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The view trusts the Redis dataset it was made ready on, not any that
// answers at the same address. A failover promotes a replica that may have
// missed the last writes (the primary's last tick among them), and the
// writes made on it afterwards can outnumber the loss before any count
// (the marker's writes, an item's seq, head or changes) is read again: a
// loss found from counts alone is found only while it shows. So the marker
// names the node it was made ready on (field node, written by SetReady: the
// server's run_id and master_replid), and every check and every scheduler's
// confirmation before a tick compares it with the node answering. Another
// run_id is another process (a failover, or a restart, even from an intact
// AOF: counted as a loss, which is conservative). A new master_replid of the
// same process is a promotion (REPLICAOF NO ONE, a Sentinel's or a
// Cluster's failover after it had been demoted) or a master creating its
// replication backlog for a first replica (or the first after
// repl-backlog-ttl without any); only the latter keeps the dataset, and it
// is the only case where a master's master_replid2 is empty, so then the
// marker is armed again with the new ID instead. Any other change is a loss
// until proved otherwise: the view is marked stale, as a rolled-back one is,
// and rebuilt from the record, and the rebuild's SetReady arms the check
// again with the new node (one rebuild per change).

// nodeField is the marker's field holding the replication ID of the node
// the view was made ready on.
const nodeField = "node"

// markerNode returns the client that reaches the node holding the marker:
// in a Redis Cluster its slot's master (a keyless INFO would go to any
// node), else rdb itself (a Sentinel failover client follows the primary).
func markerNode(ctx context.Context, rdb redis.Cmdable) (redis.Cmdable, error) {
	c, ok := rdb.(interface {
		MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	})
	if !ok {
		return rdb, nil
	}
	n, err := c.MasterForKey(ctx, MarkerKey)
	if err != nil {
		return nil, fmt.Errorf("find the master of the view marker: %w", err)
	}
	return n, nil
}

// node is what INFO says of the node answering.
type node struct {
	run, replid, replid2, role string
}

// id is what the marker's field node holds.
func (n node) id() string {
	if n.run == "" {
		return "" // unknown (nodeOf)
	}
	return n.run + ":" + n.replid
}

// noReplID is master_replid2 when a node has no past replication ID.
const noReplID = "0000000000000000000000000000000000000000"

// parseNode reads a node out of an INFO server replication answer; its id
// is empty when the answer names no run_id or master_replid.
func parseNode(info string) node {
	var n node
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "run_id":
			n.run = v
		case "master_replid":
			n.replid = v
		case "master_replid2":
			n.replid2 = v
		case "role":
			n.role = v
		}
	}
	if n.run == "" || n.replid == "" {
		return node{}
	}
	return n
}

// nodeOf reads the node out of an INFO command's answer. A server that
// refuses it with an error reply (one that does not know these sections,
// such as the embedded miniredis, or an ACL without INFO) names no node:
// the view is then checked by its counts alone, as before the node was
// recorded. Any other error (the node did not answer) is returned.
func nodeOf(info *redis.StringCmd) (node, error) {
	var rerr redis.Error
	switch err := info.Err(); {
	case err == nil:
		return parseNode(info.Val()), nil
	case errors.As(err, &rerr):
		return node{}, nil
	default:
		return node{}, fmt.Errorf("read the view node's run_id and replication ID: %w", err)
	}
}

// Verdicts of a marker's node against the node answering.
const (
	sameNode    = iota
	rearmNode   // the same process and dataset, a new replication ID (its backlog created)
	changedNode // another process, or the same one promoted: writes may be lost
)

// judgeNodeID judges the marker's node field was against the node now
// answering (see above).
func judgeNodeID(was string, now node) int {
	if was == now.id() || now.id() == "" {
		return sameNode
	}
	if run, _, _ := strings.Cut(was, ":"); run == now.run && now.role == "master" && now.replid2 == noReplID {
		return rearmNode
	}
	return changedNode
}

// infoSections are the INFO sections a node is read from.
var infoSections = []string{"server", "replication"}

// NodeID reads what names the node holding the view marker (see above):
// what SetReady records and the checks compare.
func NodeID(ctx context.Context, rdb redis.Cmdable) (string, error) {
	c, err := markerNode(ctx, rdb)
	if err != nil {
		return "", err
	}
	n, err := nodeOf(c.Info(ctx, infoSections...))
	return n.id(), err
}

// readAt is Read and the replication ID of the node that answered, in one
// round trip to the marker's node.
func readAt(ctx context.Context, rdb redis.Cmdable) (m Marker, ok bool, at node, err error) {
	c, err := markerNode(ctx, rdb)
	if err != nil {
		return Marker{}, false, node{}, err
	}
	return read(ctx, c, true)
}

// staleNodeScript marks the view stale for a change of node, only while the
// marker is still ready on the node the caller found changed: a late verdict
// (every service finds the same change) never marks stale the view a rebuild
// has made ready on the new node since.
// KEYS[1] the marker; ARGV[1] the node it names; ARGV[2] the reason.
var staleNodeScript = redis.NewScript(`if redis.call('HGET', KEYS[1], 'node') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= 'ready' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'stale', 'reason', ARGV[2])
return 1`)

// armNodeScript records node ARGV[2] on a ready marker still naming node
// ARGV[1] ("": none, a marker made ready by a version before the check).
var armNodeScript = redis.NewScript(`if redis.call('HGET', KEYS[1], 'state') ~= 'ready' then return 0 end
if (redis.call('HGET', KEYS[1], 'node') or '') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'node', ARGV[2])
return 1`)

// nodeChanged says why a ready marker of generation gen made on node was is
// not trusted on node now.
func nodeChanged(gen, was string, now node) string {
	return fmt.Sprintf("the Redis node holding the view changed (generation %s was made ready on run_id:replication ID %s, the node answering is %s, %s: a failover or a restart, which may have lost writes)",
		gen, was, now.id(), now.role)
}
