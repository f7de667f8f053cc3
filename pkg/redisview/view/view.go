// Package view is the marker of what the Redis view holds: a generation, a
// state (ready or rebuilding) and the Kafka offsets applied per
// topic-partition, plus the Watcher every service runs to know whether the
// view can be trusted (Redis lost or rolled back: not until it is rebuilt).
package view

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Keys of the marker. They live outside every item's hash tag (one marker
// describes the whole view) and share the tag {view}: advance.lua and
// SetReady's MULTI write the marker and the applied offsets together, which
// a Redis Cluster allows only within one slot.
const (
	// MarkerKey is a HASH: gen, state (ready|rebuilding), builtAt (unix ms), reason.
	MarkerKey = "wr:{view}"
	// AppliedKey is a HASH "topic/partition" -> the next offset the view has not
	// applied (the highest applied offset + 1).
	AppliedKey = "wr:{view}:applied"
	// LockKey is held by whoever rebuilds the view.
	LockKey = "wr:{view}:rebuild-lock"
)

// States of the marker.
const (
	Ready      = "ready"
	Rebuilding = "rebuilding"
)

// Marker is what the view says of itself.
type Marker struct {
	Gen     string
	State   string
	BuiltAt time.Time
	Reason  string
	// Writes counts the advances of this generation: it only grows, so a
	// lower count than one seen before is a Redis rolled back.
	Writes int64
	// Node is the replication ID of the Redis node the view was made ready
	// on (node.go); empty in a marker made by a version before the check.
	Node string
	// Applied is "topic/partition" -> next offset not applied.
	Applied map[string]int64
}

// Field returns the Applied key of a topic-partition.
func Field(topic string, partition int32) string {
	return topic + "/" + strconv.Itoa(int(partition))
}

// ParseField splits an Applied key; ok is false for a malformed one.
func ParseField(f string) (topic string, partition int32, ok bool) {
	i := strings.LastIndexByte(f, '/')
	if i <= 0 {
		return "", 0, false
	}
	p, err := strconv.ParseInt(f[i+1:], 10, 32)
	if err != nil {
		return "", 0, false
	}
	return f[:i], int32(p), true
}

// Read reads the marker; ok is false when Redis holds none (an empty view).
func Read(ctx context.Context, rdb redis.Cmdable) (m Marker, ok bool, err error) {
	m, ok, _, err = read(ctx, rdb, false)
	return m, ok, err
}

// read is Read that also reads, in the same round trip, the replication ID
// of the node that answered (node.go) when withNode.
func read(ctx context.Context, rdb redis.Cmdable, withNode bool) (m Marker, ok bool, at node, err error) {
	var h, a *redis.MapStringStringCmd
	var info *redis.StringCmd
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		h, a = p.HGetAll(ctx, MarkerKey), p.HGetAll(ctx, AppliedKey)
		if withNode {
			info = p.Info(ctx, infoSections...)
		}
		return nil
	})
	if err := errors.Join(h.Err(), a.Err()); err != nil {
		return Marker{}, false, node{}, fmt.Errorf("read view marker: %w", err)
	}
	if withNode {
		if at, err = nodeOf(info); err != nil {
			return Marker{}, false, node{}, err
		}
	}
	hv := h.Val()
	if len(hv) == 0 {
		return Marker{}, false, at, nil
	}
	m = Marker{Gen: hv["gen"], State: hv["state"], Reason: hv["reason"], Node: hv[nodeField], Applied: map[string]int64{}}
	m.Writes, _ = strconv.ParseInt(hv["writes"], 10, 64)
	if ms, err := strconv.ParseInt(hv["builtAt"], 10, 64); err == nil && ms > 0 {
		m.BuiltAt = time.UnixMilli(ms)
	}
	for k, v := range a.Val() {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			m.Applied[k] = n
		}
	}
	return m, true, at, nil
}

// SetRebuilding marks the view as being rebuilt (generation gen, for reason):
// every Watcher stops trusting it within one check interval. The marker
// names the node the rebuild writes on: SetReady refuses to mark the view
// ready on another (a failover during the rebuild may have lost its writes).
func SetRebuilding(ctx context.Context, rdb redis.Cmdable, gen, reason string) error {
	at, err := NodeID(ctx, rdb)
	if err != nil {
		return fmt.Errorf("mark the view rebuilding: %w", err)
	}
	if err := rdb.HSet(ctx, MarkerKey, "gen", gen, "state", Rebuilding, "reason", reason, nodeField, at).Err(); err != nil {
		return fmt.Errorf("mark the view rebuilding: %w", err)
	}
	return nil
}

// ErrNodeChanged: the node holding the view changed during its rebuild; the
// rebuild's writes may be lost, and it must run again.
var ErrNodeChanged = errors.New("the Redis node holding the view changed during its rebuild")

// SetReady writes the applied offsets (replacing the old ones) and then marks
// generation gen ready, in one MULTI so no reader sees one without the other.
// The marker names the node it is written on (node.go): the view is trusted
// on that node only, until the next rebuild.
func SetReady(ctx context.Context, rdb redis.Cmdable, gen string, applied map[string]int64, at time.Time) error {
	// The node is read first: a failover between this read and the MULTI
	// leaves the new node's marker naming the old one, which the next check
	// takes for a change (one more rebuild), never the other way round.
	m, _, on, err := readAt(ctx, rdb)
	if err != nil {
		return fmt.Errorf("mark the view ready: %w", err)
	}
	if m.State == Rebuilding && m.Gen == gen && m.Node != "" && judgeNodeID(m.Node, on) == changedNode {
		return fmt.Errorf("mark the view ready: %w (%s, now %s)", ErrNodeChanged, m.Node, on.id())
	}
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, AppliedKey)
		if len(applied) > 0 {
			args := make([]any, 0, 2*len(applied))
			for k, v := range applied {
				args = append(args, k, strconv.FormatInt(v, 10))
			}
			p.HSet(ctx, AppliedKey, args...)
		}
		p.Del(ctx, MarkerKey)
		p.HSet(ctx, MarkerKey, "gen", gen, "state", Ready, "builtAt", strconv.FormatInt(at.UnixMilli(), 10), "reason", "", nodeField, on.id())
		return nil
	})
	if err != nil {
		return fmt.Errorf("mark the view ready: %w", err)
	}
	return nil
}

//go:embed advance.lua
var advanceSrc string

var advanceScript = redis.NewScript(advanceSrc)

// Advance records in p that the view applied topic/partition up to next-1;
// the stored offset only moves forward. It writes nothing while the marker is
// missing, so a write racing a lost Redis never fakes a marker.
func Advance(ctx context.Context, p redis.Scripter, topic string, partition int32, next int64) *redis.Cmd {
	// EVAL, not EVALSHA: it rides in pipelines, where a NOSCRIPT cannot fall back.
	return advanceScript.Eval(ctx, p, []string{MarkerKey, AppliedKey}, Field(topic, partition), strconv.FormatInt(next, 10))
}

// ErrNotTrusted is returned by Watcher.Wait callers and gates: the view is
// empty, older than the record or being rebuilt.
var ErrNotTrusted = errors.New("the Redis view is being rebuilt")

// Confirm checks, after a read of the view, that the view it read was still
// generation gen, ready, had made at least writes advances (fewer: a Redis
// rolled back to an older snapshot) and is held by the node it was made
// ready on (another: a failover or a restart since, node.go). It returns
// ErrNotTrusted otherwise.
func Confirm(ctx context.Context, rdb redis.Cmdable, gen string, writes int64) error {
	_, _, err := confirm(ctx, rdb, gen, writes)
	return err
}

// confirm is Confirm that also returns the advance count it read and, when
// the node changed, why (the marker's node and the node answering are read
// in one round trip, from the same node).
func confirm(ctx context.Context, rdb redis.Cmdable, gen string, writes int64) (n int64, changed string, err error) {
	c, err := markerNode(ctx, rdb)
	if err != nil {
		return 0, "", fmt.Errorf("confirm the view marker: %w", err)
	}
	var m *redis.SliceCmd
	var info *redis.StringCmd
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		m, info = p.HMGet(ctx, MarkerKey, confirmFields...), p.Info(ctx, infoSections...)
		return nil
	})
	if err := m.Err(); err != nil {
		return 0, "", fmt.Errorf("confirm the view marker: %w", err)
	}
	at, err := nodeOf(info)
	if err != nil {
		return 0, "", fmt.Errorf("confirm the view marker: %w", err)
	}
	v := m.Val()
	if was, _ := v[3].(string); was != "" && judgeNodeID(was, at) == changedNode {
		return 0, nodeChanged(gen, was, at), ErrNotTrusted
	}
	n, err = confirmed(v, gen, writes)
	return n, "", err
}

// confirmFields are the marker's fields a confirmation reads.
var confirmFields = []string{"gen", "state", "writes", nodeField}

// confirmed judges the confirmFields read: still generation gen, ready, and
// at least writes advances (fewer: a Redis rolled back). It returns the
// advance count read.
func confirmed(v []any, gen string, writes int64) (int64, error) {
	g, _ := v[0].(string)
	st, _ := v[1].(string)
	ws, _ := v[2].(string)
	n, _ := strconv.ParseInt(ws, 10, 64)
	if g != gen || st != Ready || n < writes {
		return n, ErrNotTrusted
	}
	return n, nil
}

var touchScript = redis.NewScript(`if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return redis.call('HINCRBY', KEYS[1], 'writes', 1)`)

// Touch counts a write about to change the view, before it does: a reader
// confirms its read against the count, so a Redis restored to before this
// write is refused by any reader that saw the write's effect. Nothing is
// written while the marker is missing.
func Touch(ctx context.Context, rdb redis.Scripter) error {
	if err := touchScript.Eval(ctx, rdb, []string{MarkerKey}).Err(); err != nil {
		return fmt.Errorf("count a write on the view marker: %w", err)
	}
	return nil
}

// Stale marks the view as not trustworthy for reason (a gap found between
// what it applied and what comes next): every Watcher distrusts it and the
// consumer rebuilds it.
func Stale(ctx context.Context, rdb redis.Cmdable, reason string) error {
	if err := rdb.HSet(ctx, MarkerKey, "state", "stale", "reason", reason).Err(); err != nil {
		return fmt.Errorf("mark the view stale: %w", err)
	}
	return nil
}

// Applied reads the next offset the view has not applied of topic/partition
// (0 when none is recorded).
func Applied(ctx context.Context, rdb redis.Cmdable, topic string, partition int32) (int64, error) {
	v, err := rdb.HGet(ctx, AppliedKey, Field(topic, partition)).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("read the view's applied offset: %w", err)
	}
	return v, nil
}
