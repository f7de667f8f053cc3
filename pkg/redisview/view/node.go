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
// carries the replication ID of the node it was made ready on (field node,
// written by SetReady), and every check and every scheduler's confirmation
// before a tick compares it with the replication ID of the node answering.
// Redis gives a node a new replication ID when it is promoted (REPLICAOF NO
// ONE, a Sentinel's or a Cluster's failover) and when it restarts (even from
// an intact AOF: a restart counts as a loss too, and the view is rebuilt,
// which is conservative); a replica in sync carries its primary's. Another
// ID is a change of dataset until proved otherwise: the view is marked
// stale, as a rolled-back one is, and rebuilt from the record, and the
// rebuild's SetReady arms the check again with the new node's ID (one
// rebuild per change).

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

// errNoReplID: an INFO replication answer without master_replid.
var errNoReplID = errors.New("no master_replid in INFO replication")

// replID reads master_replid out of an INFO replication answer.
func replID(info string) (string, error) {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(line, "master_replid:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", errNoReplID
}

// NodeID reads the replication ID of the node holding the view marker (see
// above): what SetReady records and what the checks compare.
func NodeID(ctx context.Context, rdb redis.Cmdable) (string, error) {
	n, err := markerNode(ctx, rdb)
	if err != nil {
		return "", err
	}
	info, err := n.Info(ctx, "replication").Result()
	if err != nil {
		return "", fmt.Errorf("read the view node's replication ID: %w", err)
	}
	id, err := replID(info)
	if err != nil {
		return "", fmt.Errorf("read the view node's replication ID: %w", err)
	}
	return id, nil
}

// readAt is Read and the replication ID of the node that answered, in one
// round trip to the marker's node.
func readAt(ctx context.Context, rdb redis.Cmdable) (m Marker, ok bool, node string, err error) {
	n, err := markerNode(ctx, rdb)
	if err != nil {
		return Marker{}, false, "", err
	}
	return read(ctx, n, true)
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

// armNodeScript records the node of a ready marker that names none (one
// made ready by a version before the check): from then on it is checked.
var armNodeScript = redis.NewScript(`if redis.call('HGET', KEYS[1], 'state') ~= 'ready' then return 0 end
if redis.call('HEXISTS', KEYS[1], 'node') == 1 then return 0 end
redis.call('HSET', KEYS[1], 'node', ARGV[1])
return 1`)

// nodeChanged says why a ready marker made on node was is not trusted on
// node now ("" when it is the same node).
func nodeChanged(gen, was, now string) string {
	if was == now {
		return ""
	}
	return fmt.Sprintf("the Redis node holding the view changed (generation %s was made ready on replication ID %s, the node answering has %s: a failover or a restart, which may have lost writes)", gen, was, now)
}
