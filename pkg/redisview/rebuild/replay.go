package rebuild

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/redisview/snapshot"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// replayBatch is how many ops the replay hands queue.Line.Replay at once
// (one pipeline: a failure fails the rebuild, which starts over from empty).
const replayBatch = 4 * queue.ApplyChunk

// chunk bounds the members of one read of the seen pass.
const chunk = 5000

// replayer applies the three topics to an emptied view through the scripts
// the services run: items through apply_item.lua, registrations through
// queue.Line.Replay (the script calls of the consumer's Line.Apply) and Line.Draw, and each
// admission event through apply_admission.lua (queue.OpAdmit) right after
// the registrations it was decided after. It holds no rule of the line.
type replayer struct {
	ctx  context.Context
	rdb  redis.UniversalClient
	line *queue.Line
	// want says which items are rebuilt (nil: all).
	want func(item string) bool
	// start is the first offset of each registrations partition read: an
	// admission decided after records before it (gone by retention) is due
	// from the start.
	start map[int32]int64

	touched  map[string]bool            // items whose keys were emptied (every item on the record)
	order    []string                   // touched, in first-seen order
	known    map[string]bool            // items with a valid state on waitroom.items
	idle     map[string]bool            // items whose latest state has an idle timeout
	adm      map[string][]*admission    // per item: its admission events not applied yet, in topic order
	progress map[string]map[int32]int64 // per item: the last registrations offset replayed, per partition
	ops      []queue.Op
	places   map[string]map[string]string      // idle items: tokenId -> place key of every place a register made (the applier's)
	steer    map[string]*topics.AdmissionEvent // per item: its last steer event, restored once the line is
	maxEpoch int64
	// records is how many records the replay reads (from the end offsets
	// read at its start), replayed how many it has read.
	records, replayed atomic.Int64
	// full: no snapshot is loaded; snap: the items loaded from one (their
	// records through its offsets are passed over).
	full bool
	snap map[string]*snapshot.Snapshot

	// The applier (flush, sync): batches in order, done once it returned.
	batches chan *queue.Batch
	done    chan struct{}
	mu      sync.Mutex
	err     error // the applier's first error
}

// admission is one event of waitroom.admissions to replay.
type admission struct {
	at      int64
	applied map[int32]int64 // nil: an event from before the field (placed by time)
	tokens  []string
	exps    []int64
}

func newReplayer(ctx context.Context, rdb redis.UniversalClient) *replayer {
	return &replayer{ctx: ctx, rdb: rdb, line: queue.New(rdb), start: map[int32]int64{},
		touched: map[string]bool{}, known: map[string]bool{}, idle: map[string]bool{},
		adm: map[string][]*admission{}, snap: map[string]*snapshot.Snapshot{}, progress: map[string]map[int32]int64{}, places: map[string]map[string]string{},
		steer: map[string]*topics.AdmissionEvent{}}
}

func (r *replayer) wanted(item string) bool { return r.want == nil || r.want(item) }

// keysOf are every key of an item's line a rebuild replaces (not the
// telemetry of Refused). Changes is emptied too: the replay counts it again
// through the same scripts, under the item's new token.
func keysOf(item string) []string {
	k := queue.KeysFor(item)
	return []string{k.Seq, k.Waiting, k.Admitted, k.Users, k.Head, k.State, k.Applied, k.Epoch, k.Pace, k.Paced, k.Unpublished,
		k.Express, k.Bypass, k.Seen, k.Stats, k.Pool, k.Late, k.Drawn, k.Changes}
}

// wipe deletes the keys of items (stale ones the old view listed, or items
// met on the record for the first time), in one pipelined round.
func (r *replayer) wipe(items ...string) error {
	if len(items) == 0 {
		return nil
	}
	_, err := r.rdb.Pipelined(r.ctx, func(p redis.Pipeliner) error {
		for _, id := range items {
			p.Del(r.ctx, keysOf(id)...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("empty the keys of %d items: %w", len(items), err)
	}
	return nil
}

// touch empties item's keys the first time the record names it.
func (r *replayer) touch(item string) error {
	if r.touched[item] {
		return nil
	}
	// No op of an item is queued before its first sight: the wipe needs
	// not wait for the applier.
	if err := r.wipe(item); err != nil {
		return err
	}
	r.touched[item] = true
	r.order = append(r.order, item)
	return nil
}

// item applies one waitroom.items record as the consumer does.
func (r *replayer) item(rec *kgo.Record) error {
	id := string(rec.Key)
	if rec.Value == nil {
		if topics.ItemIDProblem(id) != "" || !r.wanted(id) {
			return nil // dead-lettered by the consumer
		}
		if err := r.touch(id); err != nil {
			return err
		}
		delete(r.idle, id)
		return r.line.DeleteItem(r.ctx, id)
	}
	s, err := topics.DecodeItem(rec.Value)
	if err != nil || s.ItemID != id || topics.ItemIDProblem(id) != "" || !r.wanted(id) {
		return nil // dead-lettered by the consumer: never applied
	}
	if err := r.touch(id); err != nil {
		return err
	}
	r.known[id] = true
	applied, err := r.line.ApplyItem(r.ctx, s)
	if err != nil {
		return err
	}
	if applied {
		r.idle[id] = s.IdleTimeoutSeconds > 0
	}
	return nil
}

// admission queues one waitroom.admissions record for its item.
func (r *replayer) admission(rec *kgo.Record) error {
	ev, err := topics.DecodeAdmission(rec.Value)
	if err != nil || (ev.Kind == "" && ev.ItemID != string(rec.Key)) {
		return nil // followers skip it too
	}
	r.maxEpoch = max(r.maxEpoch, ev.Epoch)
	if ev.Kind == topics.KindSteer && ev.ItemID == string(rec.Key) && r.wanted(ev.ItemID) {
		if err := r.touch(ev.ItemID); err != nil {
			return err
		}
		r.steer[ev.ItemID] = &ev // only the last one counts
		return nil
	}
	if ev.Kind == topics.KindEpochClaim || len(ev.Admitted) == 0 || !r.wanted(ev.ItemID) {
		return nil
	}
	if err := r.touch(ev.ItemID); err != nil {
		return err
	}
	a := &admission{at: ev.At, applied: ev.Applied, tokens: ev.Admitted, exps: ev.ExpiresAt}
	r.adm[ev.ItemID] = append(r.adm[ev.ItemID], a)
	return nil
}

// decoded is a registrations record decoded on the read's workers.
type decoded struct {
	ev  topics.RegistrationEvent
	err error
}

func decodeRegistration(rec *kgo.Record) any {
	ev, err := topics.DecodeRegistration(rec.Value)
	return &decoded{ev, err}
}

// registration replays one waitroom.registrations record as the consumer
// applies it, with the item's admissions due around it.
func (r *replayer) registration(rec *kgo.Record, v any) error {
	d := v.(*decoded)
	ev, err := d.ev, d.err
	item := string(rec.Key)
	if err == nil && item != ev.ItemID {
		err = topics.ErrInvalid
	}
	if !topics.ValidID(item) || !r.wanted(item) {
		return nil // the consumer dead-letters it and marks no offset
	}
	if s := r.snap[item]; s != nil {
		if through, ok := s.Head.Through[rec.Partition]; ok && rec.Offset <= through {
			return nil // in the snapshot
		}
	}
	if err := r.touch(item); err != nil {
		return err
	}
	r.before(item, rec)
	mark := queue.Op{Kind: queue.OpMark, ItemID: item, Partition: rec.Partition, Offset: rec.Offset}
	switch {
	case err != nil:
		r.ops = append(r.ops, mark) // dead-lettered by the consumer
	case ev.Kind == topics.KindDraw:
		// Applied alone, after the records before it (as the consumer does).
		if err := r.sync(); err != nil {
			return err
		}
		op := queue.DrawOf(&ev, rec.Partition, rec.Offset)
		cerr := r.line.CheckDraw(r.ctx, op)
		switch {
		case errors.Is(cerr, topics.ErrInvalid):
			r.ops = append(r.ops, mark)
		case cerr != nil:
			return cerr
		default:
			if _, err := r.line.Draw(r.ctx, op); err != nil {
				return err
			}
		}
	case ev.Kind == topics.KindRegister && !r.known[item]:
		r.ops = append(r.ops, mark) // the consumer dead-letters a register of an unknown item
	default:
		r.ops = append(r.ops, queue.OpOf(&ev, rec.Partition, rec.Offset, rec.Timestamp.UnixMilli()))
	}
	return r.after(item, rec)
}

// before queues the item's admissions decided before rec: those whose
// applied offsets rec's partition is past, and events without them stamped
// before rec.
func (r *replayer) before(item string, rec *kgo.Record) {
	p := r.progress[item]
	if p == nil {
		p = map[int32]int64{}
		r.progress[item] = p
	}
	if cur, ok := p[rec.Partition]; !ok || cur < rec.Offset-1 {
		p[rec.Partition] = rec.Offset - 1
	}
	r.due(item, rec.Timestamp.UnixMilli())
}

// after queues the item's admissions decided right after rec.
func (r *replayer) after(item string, rec *kgo.Record) error {
	r.progress[item][rec.Partition] = rec.Offset
	r.due(item, 0)
	if len(r.ops) >= replayBatch {
		return r.flush()
	}
	return nil
}

// due queues, in topic order, the item's admissions whose decision point the
// replay has reached: every partition of its applied offsets replayed up to
// them (or they are before the first offset read), or, for an event without
// them, a record of the item stamped after it is next (at > 0).
func (r *replayer) due(item string, at int64) {
	q := r.adm[item]
	for len(q) > 0 {
		a := q[0]
		if a.applied == nil {
			if at == 0 || at <= a.at {
				break
			}
		} else if !r.reached(item, a.applied) {
			break
		}
		r.ops = append(r.ops, admitOp(item, a))
		q = q[1:]
	}
	r.adm[item] = q
}

func (r *replayer) reached(item string, applied map[int32]int64) bool {
	for part, off := range applied {
		if s, ok := r.start[part]; ok && off < s {
			continue
		}
		if cur, ok := r.progress[item][part]; !ok || cur < off {
			return false
		}
	}
	return true
}

func admitOp(item string, a *admission) queue.Op {
	return queue.Op{Kind: queue.OpAdmit, ItemID: item, At: a.at, Admitted: a.tokens, ExpiresAt: a.exps}
}

// rest queues every admission still pending (decided after the last record
// read, or at offsets the record no longer holds), item by item in the order
// they were met.
func (r *replayer) rest() error {
	for _, item := range r.order {
		for _, a := range r.adm[item] {
			r.ops = append(r.ops, admitOp(item, a))
		}
		delete(r.adm, item)
	}
	if err := r.sync(); err != nil {
		return err
	}
	// The effective targets: each item's last steering decision, as the
	// scheduler stored it (a rebuild is not fenced).
	for _, item := range r.order {
		if ev := r.steer[item]; ev != nil {
			if err := r.line.Steer(r.ctx, item, 0, ev.Steer, time.UnixMilli(ev.At)); err != nil {
				return err
			}
		}
	}
	return nil
}

// ahead is how many prepared batches may wait for the applier.
const ahead = 4

// flush makes the pending ops into their script calls (queue.Line.Prepare:
// the calls of queue.Line.Replay) and hands them to the applier, which
// sends them (in order, one batch after the other) while the replay reads,
// decodes and prepares the next ones: redis-server runs the scripts on its
// core while this process works on the other, and it does not wait between
// two batches for the next one to be built.
func (r *replayer) flush() error {
	if len(r.ops) == 0 {
		return r.failed()
	}
	b, err := r.line.Prepare(r.ctx, r.ops)
	if err != nil {
		return err
	}
	if r.batches == nil {
		r.batches, r.done = make(chan *queue.Batch, ahead), make(chan struct{})
		go r.applier()
	}
	select {
	case r.batches <- b:
	case <-r.done:
	}
	r.ops = make([]queue.Op, 0, replayBatch)
	return r.failed()
}

// sync flushes and waits until the applier has applied every batch.
func (r *replayer) sync() error {
	if err := r.flush(); err != nil {
		return err
	}
	if r.batches == nil {
		return nil
	}
	close(r.batches)
	<-r.done
	r.batches = nil
	return r.failed()
}

// stop lets the applier end (after a failed replay) without waiting for it.
func (r *replayer) stop() {
	if r.batches != nil {
		close(r.batches)
		r.batches = nil
	}
}

func (r *replayer) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// applier applies the batches flush hands it until the channel closes or
// one fails (its error is kept; the rest are drained unapplied).
func (r *replayer) applier() {
	defer close(r.done)
	for b := range r.batches {
		if r.failed() != nil {
			continue
		}
		if err := r.apply(b); err != nil {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
		}
	}
}

// apply runs one prepared batch (queue.Batch.Run).
func (r *replayer) apply(b *queue.Batch) error {
	ops := b.Ops()
	res, err := b.Run(r.ctx)
	if err != nil {
		return fmt.Errorf("replay %d records: %w", len(ops), err)
	}
	for i, op := range ops {
		if res[i].Err != nil {
			// The consumer retries, then dead-letters; in a view just
			// emptied a refusal is a fault of this rebuild.
			return fmt.Errorf("replay: %w", res[i].Err)
		}
		if op.Kind != queue.OpRegister || !r.idle[op.ItemID] {
			continue
		}
		switch res[i].Outcome {
		case queue.Added, queue.PooledOne, queue.LateOne:
			m := r.places[op.ItemID]
			if m == nil {
				m = map[string]string{}
				r.places[op.ItemID] = m
			}
			m[op.TokenID] = op.UserID
		}
	}
	return nil
}

// seen gives every place still waiting (in line, pooled or late) of an item
// with an idle timeout a sign of life at now: the live ones are not on the
// record, so everyone gets a grace of one timeout from the rebuild.
func (r *replayer) seen(now int64) error {
	for _, item := range r.order {
		places := r.places[item]
		if !r.idle[item] || len(places) == 0 {
			continue
		}
		toks := make([]string, 0, len(places))
		for t := range places {
			toks = append(toks, t)
		}
		slices.Sort(toks)
		k := queue.KeysFor(item)
		var sets [3]*redis.FloatSliceCmd
		var marks []queue.SeenAt
		for lo := 0; lo < len(toks); lo += chunk {
			part := toks[lo:min(lo+chunk, len(toks))]
			_, err := r.rdb.Pipelined(r.ctx, func(p redis.Pipeliner) error {
				for i, key := range []string{k.Waiting, k.Pool, k.Late} {
					sets[i] = p.ZMScore(r.ctx, key, part...)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("read the waiting places of %s: %w", item, err)
			}
			for j, t := range part {
				for _, s := range sets { // a missing member reads 0: no seq, window or offset is
					if s.Val()[j] != 0 {
						marks = append(marks, queue.SeenAt{Item: item, Member: queue.SeenMember(t, places[t]), AtMs: now})
						break
					}
				}
			}
		}
		if err := r.line.MarkSeen(r.ctx, marks, false); err != nil {
			return err
		}
	}
	return nil
}
