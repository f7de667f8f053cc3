package admin

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	wrview "github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/topics"
)

// ShardLeader is which replica holds one scheduler shard's lock.
type ShardLeader struct {
	Shard   int    `json:"shard"`
	Replica string `json:"replica,omitempty"` // "" while nobody leads it
	Host    string `json:"host,omitempty"`    // the replica's host and admin address, when it said
	Self    bool   `json:"self,omitempty"`    // the replica answering
}

// GroupLag is how far a consumer group is behind its topics.
type GroupLag struct {
	Group string `json:"group"`
	Lag   int64  `json:"lag"`
	State string `json:"state,omitempty"` // the group's state (Stable, Empty...)
	Error string `json:"error,omitempty"`
}

// OpsView is what the console shows beyond the items: the dead-letter
// topics' sizes, the consumer groups' lag and who leads each shard.
type OpsView struct {
	DLQ    map[string]int64 `json:"dlq"` // records held by each .dlq topic
	Lag    []GroupLag       `json:"lag"`
	Shards []ShardLeader    `json:"shards"`
	Blocks []BlockView      `json:"blocks"`
	// BlocksSkipped counts malformed records on waitroom.blocks: each blocks
	// nobody and is logged with its offset and reason by every reader.
	BlocksSkipped int64    `json:"blocksSkipped,omitempty"`
	Errors        []string `json:"errors,omitempty"`
	Replicas      int      `json:"replicas"` // replicas that lead a shard
	// Rebuilding are the items lost on their own Redis node and not yet
	// rebuilt (each answers VIEW_REBUILDING meanwhile): since when, and the
	// records their rebuild replays.
	Rebuilding []wrview.ItemRebuild `json:"rebuilding,omitempty"`
}

// WithView shows on the console the items w finds lost and being rebuilt.
func (s *Server) WithView(w *wrview.Watcher) *Server {
	s.view = w
	return s
}

// Operations reads the Kafka side of OpsView.
type Operations struct {
	adm     *kadm.Client
	groups  []string
	leaders func(ctx context.Context) ([]ShardLeader, error)
}

// NewOperations reads the DLQ topics and the lag of groups through cl;
// leaders (the scheduler's ShardLeaders) says who leads each shard.
func NewOperations(cl *kgo.Client, groups []string, leaders func(ctx context.Context) ([]ShardLeader, error)) *Operations {
	return &Operations{adm: kadm.NewClient(cl), groups: groups, leaders: leaders}
}

// WithOperations lets the console show DLQ sizes, lag and shard leaders.
// It returns s.
func (s *Server) WithOperations(o *Operations) *Server {
	s.ops = o
	return s
}

// DLQTopics are the dead-letter topics of the contract.
func DLQTopics() []string {
	var out []string
	for _, sp := range topics.Specs(topics.DefaultOptions()) {
		if strings.HasSuffix(sp.Name, ".dlq") {
			out = append(out, sp.Name)
		}
	}
	return out
}

// DLQSizes counts the records each DLQ topic holds: end minus start offset
// summed over its partitions (what retention has not deleted yet).
func (o *Operations) DLQSizes(ctx context.Context) (map[string]int64, error) {
	names := DLQTopics()
	starts, err := o.adm.ListStartOffsets(ctx, names...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list start offsets: %w", err)
	}
	ends, err := o.adm.ListEndOffsets(ctx, names...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets: %w", err)
	}
	out := make(map[string]int64, len(names))
	for _, n := range names {
		out[n] = 0
	}
	ends.Each(func(e kadm.ListedOffset) {
		if s, ok := starts.Lookup(e.Topic, e.Partition); ok && e.Offset > s.Offset {
			out[e.Topic] += e.Offset - s.Offset
		}
	})
	return out, nil
}

// Lags reads each group's total lag.
func (o *Operations) Lags(ctx context.Context) ([]GroupLag, error) {
	ls, err := o.adm.Lag(ctx, o.groups...)
	if err != nil {
		return nil, fmt.Errorf("group lag: %w", err)
	}
	out := make([]GroupLag, 0, len(o.groups))
	for _, g := range o.groups {
		l, ok := ls[g]
		gl := GroupLag{Group: g}
		switch {
		case !ok:
			gl.Error = "not described"
		case l.Error() != nil:
			gl.Error = l.Error().Error()
		default:
			gl.Lag, gl.State = l.Lag.Total(), l.State
		}
		out = append(out, gl)
	}
	return out, nil
}

// opsView reads everything the console shows beyond the items; a part that
// cannot be read is named in Errors and the rest still shown.
func (s *Server) opsView(ctx context.Context) *OpsView {
	if s.ops == nil && s.blocks == nil && s.view == nil {
		return nil
	}
	v := &OpsView{}
	if s.view != nil {
		v.Rebuilding = s.view.Rebuilding()
	}
	if s.blocks != nil {
		v.Blocks, v.BlocksSkipped = s.blockViews(), s.blocks.Skipped()
	}
	if s.ops == nil {
		return v
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var err error
	if v.DLQ, err = s.ops.DLQSizes(ctx); err != nil {
		v.Errors = append(v.Errors, "DLQ: "+err.Error())
	}
	if v.Lag, err = s.ops.Lags(ctx); err != nil {
		v.Errors = append(v.Errors, "lag: "+err.Error())
	}
	if s.ops.leaders != nil {
		if v.Shards, err = s.ops.leaders(ctx); err != nil {
			v.Errors = append(v.Errors, "shards: "+err.Error())
		}
		seen := map[string]bool{}
		for _, sh := range v.Shards {
			if sh.Replica != "" && !seen[sh.Replica] {
				seen[sh.Replica] = true
				v.Replicas++
			}
		}
	}
	return v
}
