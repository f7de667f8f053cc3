// Package queue owns an item's waiting line in Redis: the keys, and the Lua
// scripts that change them, one script per state change so no crash can leave
// half a move. Every write is keyed by the Kafka offset it applies, so replays
// are no-ops.
package queue

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/security/bypass"
	"github.com/waitroom/waitroom/topics"
)

// Keys of one item; all share the {item} hash tag so one item lives in one
// Redis Cluster slot and a script may touch them together.
type Keys struct {
	Seq, Waiting, Admitted, Users, Head, State, Applied, Epoch, Pace, Paced, Unpublished string
	// Fairness (issue 16): Pool ZSET tokenId scored by draw window (pre-queued,
	// not yet drawn); Late ZSET tokenId scored by offset (arrived after the
	// window closed, placed behind the draw); Drawn HASH window/round of the
	// last draw; Seen ZSET "tokenId userId" scored by last sign of life (ms);
	// Express ZSET tokenId scored by seq (bypass codes: admitted at the next
	// tick); Bypass HASH code id -> uses; Stats HASH counters the record
	// also gives (abandoned: places released idle); Refused HASH error code
	// -> registrations the api refused for the item (telemetry, not the
	// view: counted since the key was made, kept by a rebuild).
	Pool, Late, Drawn, Seen, Express, Bypass, Stats, Refused string
	// Changes STRING counts the calls that changed the line (the prelude's
	// changed): it only grows while the item's keys live, so a lower count
	// than a watcher saw is a node that lost writes (pkg/redisview/view).
	// Not part of the line: live and a rebuild may count differently.
	Changes string
}

// KeysFor returns the keys of item.
func KeysFor(item string) Keys {
	p := "wr:{" + item + "}:"
	return Keys{
		Seq: p + "seq", Waiting: p + "waiting", Admitted: p + "admitted", Users: p + "users",
		Head: p + "head", State: p + "state", Applied: p + "applied", Epoch: p + "epoch",
		Pace: p + "pace", Paced: p + "paced", Unpublished: p + "unpublished",
		Pool: p + "pool", Late: p + "late", Drawn: p + "drawn", Seen: p + "seen",
		Express: p + "express", Bypass: p + "bypass", Stats: p + "stats", Refused: p + "refused",
		Changes: p + "changes",
	}
}

// withPrelude is a script's source with the prelude's shared rules before it.
func withPrelude(src string) string {
	return prelude + src
}

// withUnpublished is a script that reads admissions with the rule of
// unpublished.lua before it.
func withUnpublished(src string) string {
	return unpublishedLua + src
}

// ActiveItems is the registry of items with a live line: the scheduler's work
// list, so nothing ever needs KEYS or SCAN.
const ActiveItems = "wr:items:active"

var (
	//go:embed enqueue.lua
	enqueueLua string
	//go:embed leave.lua
	leaveLua string
	//go:embed mark.lua
	markLua string
	//go:embed status.lua
	statusSrc string
	//go:embed admitted.lua
	admittedSrc string
	//go:embed motion.lua
	motionSrc string
	//go:embed rewind.lua
	rewindSrc string
	//go:embed apply_item.lua
	applyItemSrc string
	//go:embed promote.lua
	promoteSrc string
	//go:embed complete.lua
	completeLua string
	//go:embed ack.lua
	ackSrc string
	//go:embed abandon.lua
	abandonLua string
	//go:embed apply_admission.lua
	applyAdmissionLua string
	//go:embed settle.lua
	settleLua string
	//go:embed steer.lua
	steerSrc string

	//go:embed prelude.lua
	prelude string
	//go:embed unpublished.lua
	unpublishedLua string
	// The sources of the scripts that share the prelude's rules.
	enqueueSrc, leaveSrc, markSrc, abandonSrc = withPrelude(enqueueLua), withPrelude(leaveLua), withPrelude(markLua), withPrelude(abandonLua)
	applyAdmissionSrc, completeSrc            = withPrelude(applyAdmissionLua), withPrelude(completeLua)

	enqueueScript   = redis.NewScript(enqueueSrc)
	leaveScript     = redis.NewScript(leaveSrc)
	markScript      = redis.NewScript(markSrc)
	statusScript    = redis.NewScript(withUnpublished(statusSrc))
	admittedScript  = redis.NewScript(withUnpublished(admittedSrc))
	motionScript    = redis.NewScript(motionSrc)
	rewindScript    = redis.NewScript(rewindSrc)
	applyItemScript = redis.NewScript(withPrelude(applyItemSrc))
	promoteScript   = redis.NewScript(withPrelude(promoteSrc))
	completeScript  = redis.NewScript(completeSrc)
	ackScript       = redis.NewScript(ackSrc)
	abandonScript   = redis.NewScript(abandonSrc)
	admitScript     = redis.NewScript(applyAdmissionSrc)
	settleScript    = redis.NewScript(withPrelude(settleLua))
	steerScript     = redis.NewScript(steerSrc)

	writeScripts = []*redis.Script{enqueueScript, leaveScript, markScript, completeScript, abandonScript}
	// opScripts are the sources Apply loads in each transaction, by kind.
	opScripts = [...]string{OpRegister: enqueueSrc, OpLeave: leaveSrc, OpMark: markSrc, OpComplete: completeSrc, OpAbandon: abandonSrc,
		OpAdmit: applyAdmissionSrc}
)

// OpKind says what an Op does to the line.
type OpKind uint8

const (
	// OpRegister puts a user at the back of the line (unless already in it).
	OpRegister OpKind = iota + 1
	// OpLeave removes the user's place.
	OpLeave
	// OpMark records the offset as consumed without touching the line (a record sent to the DLQ).
	OpMark
	// OpComplete ends the user's admission (the API applied it at once; this replays it).
	OpComplete
	// OpAbandon releases an idle waiting place (the scheduler's sweep); an
	// admitted token keeps its admission.
	OpAbandon
	// OpAdmit writes again admissions promote decided (an event of
	// waitroom.admissions, on a rebuild): Admitted with ExpiresAt, at At.
	// It keeps no applied offset: the rebuild applies it right after the
	// registrations it was decided after (topics.AdmissionEvent.Applied).
	OpAdmit
)

// Op is one registrations record to apply, identified by its Kafka position.
type Op struct {
	Kind    OpKind
	ItemID  string
	TokenID string
	// UserID is the key of the op's place in the line (topics.PlaceKey):
	// the registration's own tokenId, or a userId a site-signed assertion
	// proved (then a repeat registration of it is a Duplicate).
	UserID    string
	Partition int32
	Offset    int64
	// Bypass, on a register, is the bypass code it used: the place is
	// express (admitted at the next tick) while the code has uses left.
	Bypass *BypassOp
	// Window is a register's draw window (topics.RegistrationEvent.Window).
	Window int64
	// At is the record's timestamp (unix ms): the moment a register is
	// judged at (an admission whose expiry is not after it is no place to
	// keep), so that applying a record gives the same line live and on a
	// rebuild. 0 (ops made without a record, in tests): Redis's clock.
	// For OpAdmit, the event's time.
	At int64
	// Admitted and ExpiresAt are an OpAdmit's tokenIds and their expiries
	// (unix ms; none: the event has none, see apply_admission.lua).
	Admitted  []string
	ExpiresAt []int64
}

// OpOf is the op that applies registration record ev (not a draw: see
// DrawOf) found at partition and offset and stamped at (unix ms): what the
// consumer applies and a rebuild replays alike.
func OpOf(ev *topics.RegistrationEvent, partition int32, offset, at int64) Op {
	var kind OpKind
	switch ev.Kind {
	case topics.KindRegister:
		kind = OpRegister
	case topics.KindLeave:
		kind = OpLeave
	case topics.KindComplete:
		kind = OpComplete
	case topics.KindAbandon:
		kind = OpAbandon
	}
	op := Op{Kind: kind, ItemID: ev.ItemID, TokenID: ev.TokenID, UserID: ev.PlaceKey(), Partition: partition, Offset: offset,
		Window: ev.Window, At: at}
	if ev.Bypass != nil { // a bypass code's use, counted by the line
		op.Bypass = &BypassOp{Code: ev.Bypass.Code, Count: bypass.Allowance(ev)}
	}
	return op
}

// BypassOp is a bypass code's use: its id and how many registrations it
// admits (0: the code had expired when the record was made).
type BypassOp struct {
	Code  string
	Count int64
}

// Outcome of applying one Op.
type Outcome string

// Outcomes.
const (
	Added     Outcome = "ADDED"       // a new place at the back, Seq set
	Duplicate Outcome = "DUPLICATE"   // the user already holds a place (TokenID names it), or the token's own place ended (TokenID empty: a token is placed once)
	Left      Outcome = "LEFT"        // the user's place was removed
	NotInLine Outcome = "NOT_IN_LINE" // a leave for a user without a place
	Marked    Outcome = "MARKED"      // offset recorded, line unchanged
	Ended     Outcome = "ENDED"       // an admission was ended (or had ended already)
	Replay    Outcome = "REPLAY"      // this offset was applied before: nothing changed
	Exhausted Outcome = "EXHAUSTED"   // a bypass register whose code had no use left: never placed
	Released  Outcome = "ABANDONED"   // an idle waiting place was released (abandon)
	PooledOne Outcome = "POOLED"      // pre-queued for its window's draw (Seq: the window)
	LateOne   Outcome = "LATE"        // queued behind a pending draw (Seq: the offset)
)

// Result of applying one Op.
type Result struct {
	Outcome Outcome
	Seq     int64
	TokenID string
	// Err is Redis's refusal of this op alone (a corrupt key: WRONGTYPE...);
	// retrying will not help, the record needs an operator.
	Err error
}

// Line is the Redis view of every item's waiting line.
type Line struct {
	rdb redis.UniversalClient
}

// New returns a Line over rdb.
func New(rdb redis.UniversalClient) *Line { return &Line{rdb: rdb} }

// Load loads every script into Redis so pipelines can use EVALSHA. PromoteMany
// and AckPublished call it again by themselves when Redis answers NOSCRIPT
// (after a restart or flush); Apply loads its scripts in each transaction.
func (l *Line) Load(ctx context.Context) error {
	for _, s := range append(writeScripts, statusScript, admittedScript, applyItemScript, promoteScript, completeScript, ackScript, admitScript, settleScript) {
		if err := s.Load(ctx, l.rdb).Err(); err != nil {
			return fmt.Errorf("load script: %w", err)
		}
	}
	return nil
}

// ApplyChunk bounds the ops of one MULTI/EXEC: Redis serves nobody else
// while it runs a transaction.
const ApplyChunk = 1000

// Apply applies ops in order and registers their items as active, in
// transactions of at most ApplyChunk ops. Each script call is atomic (an
// item's run of registrations is one enqueue call, see plan); a failed Apply
// can be retried whole, since applied offsets make a second application a
// no-op.
//
// A transaction of several scripts starts by loading them (SCRIPT LOAD of a
// loaded script only hashes it), so a flushed script cache or a restarted
// Redis cannot answer NOSCRIPT for some ops and run the others: that would
// move the applied offsets past ops that never ran, and running those again
// would answer REPLAY, losing them. A transaction of one script needs no
// load (see apply).
func (l *Line) Apply(ctx context.Context, ops []Op) ([]Result, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	out := make([]Result, 0, len(ops))
	for lo := 0; lo < len(ops); lo += ApplyChunk {
		res, err := l.apply(ctx, ops[lo:min(lo+ApplyChunk, len(ops))])
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
	}
	return out, nil
}

// EnqueueBatch bounds the registrations one enqueue.lua call applies (2, 3
// or 6 arguments each, and their timestamps in one): an item's registrations
// of one partition in a chunk go in calls of at most this many, so Redis runs
// the script once per item and batch instead of once per record. (Calls of a whole chunk, 1,000, saved
// no CPU measurably: BENCHMARKS.md, 2026-11-26.)
const EnqueueBatch = 250

// ReplayBatch bounds the registrations of one enqueue.lua call of Replay
// (the rebuild): a replay sends thousands of one item's records at once, and
// a larger call spreads the call's own work (its fixed reads and writes,
// the script's start) over more of them: about 3% of redis-server's
// instructions a record against calls of 250 (bench/replayir.sh,
// BENCHMARKS.md session 9). Bounded like ApplyChunk: Redis serves nobody
// else while a call runs.
const ReplayBatch = 1000

// call is one script call of a chunk: a single op, or a run of one item's
// registrations of one partition (enqueue.lua).
type call struct {
	ops []int // indexes into the chunk, in order
	cmd *redis.Cmd
}

// plan groups a chunk's ops into calls. Ops of different items touch
// different keys, so only each item's order matters: an item's registrations
// join one call until another kind of op of that item (a leave, a mark...)
// or a registration of another partition comes between them, or the call
// holds batch.
func plan(ops []Op, batch int) []call {
	calls := make([]call, 0, 8)
	open := make(map[string]int, 4) // item -> its open enqueue call
	for i, op := range ops {
		if op.Kind != OpRegister {
			delete(open, op.ItemID)
			calls = append(calls, call{ops: []int{i}})
			continue
		}
		if c, ok := open[op.ItemID]; ok && len(calls[c].ops) < batch && ops[calls[c].ops[0]].Partition == op.Partition {
			calls[c].ops = append(calls[c].ops, i)
			continue
		}
		open[op.ItemID] = len(calls)
		calls = append(calls, call{ops: []int{i}})
	}
	return calls
}

// enqueueArgs packs a call's registrations as enqueue.lua reads them: the
// partition; the fields a record, 3 (offset, tokenId, timestamp) when every
// record's place key is its token, with no window and no bypass code (the
// common case), 4 (those and the place key) when some place key is a
// user's, else 7 (those 4, then window, code, count); whether the records'
// offsets increase and their place keys and tokens are each distinct
// (fresh); the timestamps in one string of one width, the offsets likewise;
// then each other field column by column.
func enqueueArgs(ops []Op, idx []int) []any {
	stride, width, owidth := 3, 1, 1
	for _, j := range idx {
		r := &ops[j]
		switch {
		case r.Window != 0 || r.Bypass != nil:
			stride = 7
		case r.UserID != r.TokenID:
			stride = max(stride, 4)
		}
		width = max(width, digits(r.At))
		owidth = max(owidth, digits(r.Offset))
	}
	n := len(idx)
	args := make([]any, 0, 5+(stride-2)*n)
	times := make([]byte, 0, width*n)
	offs := make([]byte, 0, owidth*n)
	for _, j := range idx {
		times = appendPadded(times, ops[j].At, width)
		offs = appendPadded(offs, ops[j].Offset, owidth)
	}
	args = append(args, strconv.FormatInt(int64(ops[idx[0]].Partition), 10), strconv.Itoa(stride),
		fresh(ops, idx, stride > 3), string(times), string(offs))
	for _, j := range idx {
		args = append(args, ops[j].TokenID)
	}
	if stride == 3 {
		return args
	}
	for _, j := range idx {
		args = append(args, ops[j].UserID)
	}
	if stride == 4 {
		return args
	}
	for _, j := range idx {
		args = append(args, strconv.FormatInt(ops[j].Window, 10))
	}
	for _, j := range idx {
		code := ""
		if ops[j].Bypass != nil {
			code = ops[j].Bypass.Code
		}
		args = append(args, code)
	}
	for _, j := range idx {
		count := "0"
		if ops[j].Bypass != nil {
			count = strconv.FormatInt(ops[j].Bypass.Count, 10)
		}
		args = append(args, count)
	}
	return args
}

// fresh is enqueue.lua's ARGV[3]: "1" when the offsets of the records idx
// increase and no tokenId and (with users, the place keys are not the
// tokens) no place key appears twice among them, so the script may judge
// each record by its place key's and token's state before the call, and
// every record after one above the applied offset as new; else "0".
func fresh(ops []Op, idx []int, users bool) string {
	toks := make(map[string]struct{}, len(idx))
	var keys map[string]struct{}
	if users {
		keys = make(map[string]struct{}, len(idx))
	}
	for k, j := range idx {
		if k > 0 && ops[j].Offset <= ops[idx[k-1]].Offset {
			return "0"
		}
		if _, ok := toks[ops[j].TokenID]; ok {
			return "0"
		}
		toks[ops[j].TokenID] = struct{}{}
		if !users {
			continue
		}
		if _, ok := keys[ops[j].UserID]; ok {
			return "0"
		}
		keys[ops[j].UserID] = struct{}{}
	}
	return "1"
}

// digits is the length of v in decimal, its sign included.
func digits(v int64) int {
	var buf [20]byte
	return len(strconv.AppendInt(buf[:0], v, 10))
}

// appendPadded appends v in decimal, zero-padded to width characters (after
// its sign), as tonumber reads it back.
func appendPadded(b []byte, v int64, width int) []byte {
	var buf [20]byte
	d := strconv.AppendInt(buf[:0], v, 10)
	if v < 0 {
		b, d = append(b, '-'), d[1:]
		width--
	}
	for range width - len(d) {
		b = append(b, '0')
	}
	return append(b, d...)
}

// Replay applies ops in order as Apply does, for a replay into a view that is
// thrown away whole if it fails (the rebuild): every call goes in one plain
// pipeline (one round trip, no MULTI/EXEC, no SCRIPT LOAD: Load the scripts
// first), an item's registrations in calls of up to ReplayBatch. Without the
// transaction, a call that fails (NOSCRIPT after a flush of the script
// cache, OOM, a dropped connection) does not stop the calls after it, which
// Apply's callers rely on to retry a batch: Replay's error means the view
// holds some unknown part of ops, and only starting over from an empty view
// is right. A record Redis refused is its Result's Err, as with Apply.
// Replay is Prepare, then Batch.Run.
func (l *Line) Replay(ctx context.Context, ops []Op) ([]Result, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	b, err := l.Prepare(ctx, ops)
	if err != nil {
		return nil, err
	}
	return b.Run(ctx)
}

// Batch is ops made into the script calls Replay sends (Line.Prepare), not
// sent yet: a replay builds the next batch while Redis runs the one before,
// so Redis does not wait for the building.
type Batch struct {
	ops   []Op
	calls []call
	pipe  redis.Pipeliner
}

// Prepare plans ops into script calls on a pipeline of their own, as Replay
// sends them; Batch.Run sends them. Batches run one after the other on one
// goroutine apply their ops in order, as one Replay of them all would.
func (l *Line) Prepare(ctx context.Context, ops []Op) (*Batch, error) {
	calls := plan(ops, ReplayBatch)
	_, cluster := l.rdb.(*redis.ClusterClient)
	p := l.rdb.Pipeline()
	if err := sendCalls(ctx, p, cluster, ops, calls); err != nil {
		return nil, fmt.Errorf("replay %d ops: %w", len(ops), err)
	}
	return &Batch{ops: ops, calls: calls, pipe: p}, nil
}

// Ops are the batch's ops, in the order Run applies them.
func (b *Batch) Ops() []Op { return b.ops }

// Run sends the batch in one round trip and reads one Result per op, as
// Replay does (its error: the view holds an unknown part of the ops).
func (b *Batch) Run(ctx context.Context) ([]Result, error) {
	if len(b.ops) == 0 {
		return nil, nil
	}
	_, err := b.pipe.Exec(ctx)
	if err != nil && !IsRecordError(err) {
		return nil, fmt.Errorf("replay %d ops: %w", len(b.ops), err)
	}
	return readCalls(b.ops, b.calls)
}

// apply runs one chunk. On a Redis Cluster a MULTI cannot span the items'
// slots (nor the registry's), so the chunk goes as a plain pipeline that
// go-redis splits by node, each call sent with EVAL (the script's text): no
// call can be refused NOSCRIPT while a later call of its item runs, which is
// what the MULTI with SCRIPT LOAD guarantees on one server. The calls of one
// item share a slot, so they reach one node on one connection, in order.
//
// A chunk whose ops all run one script (the common case: registrations only)
// skips the SCRIPT LOAD, which hashes the script's text each time: inside
// MULTI/EXEC nothing can flush or load the cache, so one script is cached for
// every op of the transaction or for none, and a NOSCRIPT refused them all.
// The chunk is then run again, loading its script first. A chunk of one call
// (one item's registrations, the consumer's usual batch) needs no
// transaction at all: it goes as a plain pipeline, SADD then the call.
func (l *Line) apply(ctx context.Context, ops []Op) ([]Result, error) {
	_, cluster := l.rdb.(*redis.ClusterClient)
	if cluster || !oneScript(ops) {
		return l.applyOnce(ctx, ops, true)
	}
	out, err := l.applyOnce(ctx, ops, false)
	if errors.Is(err, errAllNoScript) {
		return l.applyOnce(ctx, ops, true)
	}
	return out, err
}

// oneScript tells whether every op of a chunk runs the same script.
func oneScript(ops []Op) bool {
	for _, op := range ops[1:] {
		if op.Kind != ops[0].Kind {
			return false
		}
	}
	return true
}

// errAllNoScript is applyOnce's answer when Redis had none of the chunk's
// script: nothing ran.
var errAllNoScript = errors.New("NOSCRIPT: the chunk's script was not cached")

// applyOnce runs one chunk in one transaction (a pipeline on a cluster),
// starting with SCRIPT LOAD of each script it uses when load is set.
// Without load it answers errAllNoScript when Redis had no script cached.
func (l *Line) applyOnce(ctx context.Context, ops []Op, load bool) ([]Result, error) {
	calls := plan(ops, EnqueueBatch)
	_, cluster := l.rdb.(*redis.ClusterClient)
	run := l.rdb.TxPipelined
	if cluster || (!load && len(calls) == 1) {
		// One script call is atomic on its own, and a NOSCRIPT refuses all
		// of it: MULTI/EXEC would add two commands and nothing else.
		run = l.rdb.Pipelined
	}
	_, err := run(ctx, func(p redis.Pipeliner) error {
		if load && !cluster {
			loadScripts(ctx, p, ops)
		}
		return sendCalls(ctx, p, cluster, ops, calls)
	})
	if !load {
		missing := 0
		for _, c := range calls {
			if isNoScript(c.cmd.Err()) {
				missing++
			}
		}
		switch {
		case missing == len(calls):
			return nil, errAllNoScript
		case missing > 0: // cannot be: one script, one transaction
			return nil, fmt.Errorf("apply %d ops: %d of %d calls of one script refused NOSCRIPT in one transaction", len(ops), missing, len(calls))
		}
	}
	if err != nil && !IsRecordError(err) {
		return nil, fmt.Errorf("apply %d ops: %w", len(ops), err)
	}
	return readCalls(ops, calls)
}

// loadScripts queues a SCRIPT LOAD of each script ops use, once each.
func loadScripts(ctx context.Context, p redis.Pipeliner, ops []Op) {
	var loaded [len(opScripts)]bool
	for _, op := range ops {
		if op.Kind < OpRegister || int(op.Kind) >= len(opScripts) || loaded[op.Kind] {
			continue
		}
		loaded[op.Kind] = true
		p.ScriptLoad(ctx, opScripts[op.Kind])
	}
}

// sendCalls queues each call's script on p (with its text on a cluster,
// where no SCRIPT LOAD precedes it; by its SHA otherwise) and the registry
// of active items for each item that registers.
func sendCalls(ctx context.Context, p redis.Pipeliner, cluster bool, ops []Op, calls []call) error {
	eval := func(s *redis.Script, keys []string, args ...any) *redis.Cmd {
		if cluster {
			return s.Eval(ctx, p, keys, args...)
		}
		return s.EvalSha(ctx, p, keys, args...)
	}
	seen := make(map[string]struct{}, 4)
	for ci := range calls {
		c := &calls[ci]
		i := c.ops[0]
		op := ops[i]
		k := KeysFor(op.ItemID)
		part, off := strconv.FormatInt(int64(op.Partition), 10), strconv.FormatInt(op.Offset, 10)
		switch op.Kind {
		case OpRegister:
			if _, ok := seen[op.ItemID]; !ok {
				seen[op.ItemID] = struct{}{}
				p.SAdd(ctx, ActiveItems, op.ItemID)
			}
			c.cmd = eval(enqueueScript, []string{k.Applied, k.Users, k.Seq, k.Waiting, k.Admitted, k.Pool, k.Late, k.Drawn, k.Express, k.Bypass, k.Changes}, enqueueArgs(ops, c.ops)...)
		case OpLeave:
			c.cmd = eval(leaveScript, []string{k.Applied, k.Users, k.Waiting, k.Admitted, k.Pool, k.Late, k.Changes}, part, off, op.TokenID, op.UserID)
		case OpMark:
			c.cmd = eval(markScript, []string{k.Applied, k.Changes}, part, off)
		case OpComplete:
			c.cmd = eval(completeScript, []string{k.Admitted, k.Users, k.Waiting, k.Changes}, op.TokenID, op.UserID)
		case OpAdmit:
			c.cmd = eval(admitScript, []string{k.Waiting, k.Admitted, k.Head, k.Paced, k.Express, k.Pace, k.State, k.Changes}, admitArgs(op)...)
		case OpAbandon:
			c.cmd = eval(abandonScript, []string{k.Applied, k.Users, k.Waiting, k.Pool, k.Late, k.Stats, k.Changes}, part, off, op.TokenID, op.UserID)
		default:
			return fmt.Errorf("op %d: unknown kind %d", i, op.Kind)
		}
	}
	return nil
}

// admitArgs packs an OpAdmit as apply_admission.lua reads it: the event's
// time, then tokenId, expiry pairs (expiry 0 when the event has none).
func admitArgs(op Op) []any {
	args := make([]any, 0, 1+2*len(op.Admitted))
	args = append(args, strconv.FormatInt(op.At, 10))
	for j, tok := range op.Admitted {
		exp := int64(0)
		if len(op.ExpiresAt) == len(op.Admitted) {
			exp = op.ExpiresAt[j]
		}
		args = append(args, tok, strconv.FormatInt(exp, 10))
	}
	return args
}

// readCalls reads the answers of calls into one Result per op; a call a
// script refused before its first write (a record error) refuses its ops.
func readCalls(ops []Op, calls []call) ([]Result, error) {
	out := make([]Result, len(ops))
	refused := func(i int, err error) {
		out[i] = Result{Err: fmt.Errorf("apply op at offset %d of %s: %w", ops[i].Offset, ops[i].ItemID, err)}
	}
	for _, c := range calls {
		i := c.ops[0]
		if err := c.cmd.Err(); err != nil {
			if !IsRecordError(err) {
				return nil, fmt.Errorf("apply op %d: %w", i, err)
			}
			for _, j := range c.ops { // the script refused before its first write
				refused(j, err)
			}
			continue
		}
		if ops[i].Kind == OpComplete { // complete.lua answers 0 or 1, not a triple
			out[i] = Result{Outcome: Ended, TokenID: ops[i].TokenID}
			continue
		}
		vals, err := c.cmd.Slice()
		if err != nil {
			return nil, fmt.Errorf("apply op %d: %w", i, err)
		}
		if ops[i].Kind == OpRegister {
			err = parseEnqueue(vals, ops, c.ops, out, refused)
		} else {
			out[i], err = parseResult(vals)
		}
		if err != nil {
			return nil, fmt.Errorf("apply op %d: %w", i, err)
		}
	}
	return out, nil
}

// parseEnqueue reads enqueue.lua's flat answer for the ops idx into out: an
// integer for a record ADDED (its seq) or a REPLAY (0), -m then s for m
// records in a row ADDED at seqs s, s+1, ..., else three values, outcome,
// seq, tokenId. A record Redis refused goes to refused.
func parseEnqueue(vals []any, ops []Op, idx []int, out []Result, refused func(int, error)) error {
	short := func() error { return fmt.Errorf("enqueue answered %d values for %d records", len(vals), len(idx)) }
	v := 0
	for p := 0; p < len(idx); p++ {
		j := idx[p]
		if v >= len(vals) {
			return short()
		}
		if seq, ok := vals[v].(int64); ok {
			switch {
			case seq > 0:
				out[j] = Result{Outcome: Added, Seq: seq, TokenID: ops[j].TokenID}
			case seq == 0:
				out[j] = Result{Outcome: Replay}
			default: // a run of -seq records
				if v+1 >= len(vals) || p-int(seq) > len(idx) {
					return short()
				}
				first, ok := vals[v+1].(int64)
				if !ok {
					return fmt.Errorf("op %d: enqueue answered a run of %d from %v", j, -seq, vals[v+1])
				}
				for q := range int(-seq) {
					r := idx[p+q]
					out[r] = Result{Outcome: Added, Seq: first + int64(q), TokenID: ops[r].TokenID}
				}
				p += int(-seq) - 1
				v++
			}
			v++
			continue
		}
		if v+3 > len(vals) {
			return short()
		}
		r, err := parseResult(vals[v : v+3])
		if err != nil {
			return fmt.Errorf("op %d: %w", j, err)
		}
		v += 3
		if r.Outcome == refusedOne {
			err := scriptError(r.TokenID)
			if !IsRecordError(err) {
				return fmt.Errorf("op %d: %w", j, err)
			}
			refused(j, err)
			continue
		}
		out[j] = r
	}
	if v != len(vals) {
		return short()
	}
	return nil
}

// refusedOne is enqueue.lua's answer for a record Redis refused (its third
// value is the error): the record wrote nothing, the others were applied.
const refusedOne Outcome = "ERR"

// scriptError is a Redis error a script returned as a value (enqueue.lua's
// refusal of one record of many), so IsRecordError reads it as Redis's own.
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks it as Redis's answer (go-redis's redis.Error).
func (scriptError) RedisError() {}

// IsRecordError tells a refusal of one command (a reply error such as
// WRONGTYPE) from trouble with Redis itself (network, restart, failover,
// memory, a disk it cannot persist to: MISCONF), which must pause
// consumption rather than fail a record.
func IsRecordError(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, transient := range []string{"NOSCRIPT", "EXECABORT", "LOADING", "BUSY", "READONLY", "MISCONF", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "OOM", "NOREPLICAS", "MOVED", "ASK"} {
		if strings.HasPrefix(msg, transient) {
			return false
		}
	}
	return true
}

func parseResult(v []any) (Result, error) {
	if len(v) != 3 {
		return Result{}, fmt.Errorf("script returned %d values, want 3", len(v))
	}
	o, _ := v[0].(string)
	seq, _ := v[1].(int64)
	tok, _ := v[2].(string)
	return Result{Outcome: Outcome(o), Seq: seq, TokenID: tok}, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOSCRIPT")
}

// Status reads where tokenID's registration, at (partition, offset) and kept
// under the place key key (topics.PlaceKey), stands, in one round trip. Only
// tokenID's own place is answered: when another token holds key's place (a
// proven user's repeat registration) the state is Duplicated and TokenID
// names that token if its place is live. An empty tokenID reads whichever
// token holds key (operators and tests, never a client's request).
func (l *Line) Status(ctx context.Context, item, key, tokenID string, partition int32, offset int64) (line.Status, error) {
	k := KeysFor(item)
	v, err := statusScript.Run(ctx, l.rdb, []string{k.Users, k.Waiting, k.Admitted, k.Applied, k.Pace, k.Paced, k.Head, k.Express, k.Pool, k.Late, k.Unpublished},
		key, strconv.FormatInt(int64(partition), 10), strconv.FormatInt(offset, 10), tokenID).Slice()
	if err != nil {
		return line.Status{}, fmt.Errorf("status of %s in %s: %w", key, item, err)
	}
	if len(v) < 4 {
		return line.Status{}, fmt.Errorf("status of %s in %s: script returned %d values", key, item, len(v))
	}
	s := line.Status{}
	st, _ := v[0].(string)
	s.State = line.State(st)
	a, _ := v[1].(int64)
	b, _ := v[2].(int64)
	s.TokenID, _ = v[3].(string)
	switch s.State {
	case line.Waiting:
		s.Position, s.WaitingTotal = a, b
		if len(v) > 4 {
			s.AdmittedLastMinute, _ = v[4].(int64)
		}
		if len(v) > 6 {
			s.Active, _ = v[5].(int64)
			oldest, _ := v[6].(string)
			s.PacedSinceMs = pacedMs(oldest)
		}
		if len(v) > 8 {
			seq, _ := v[7].(string) // ZSCORE answers a string
			s.Seq, _ = strconv.ParseInt(seq, 10, 64)
			s.Head, _ = v[8].(int64)
		}
	case line.Admitted:
		s.ExpiresAtMs = a
	case line.Pooled, line.Late:
		s.DrawAt, s.InDraw = a, b
	}
	return s, nil
}

func (l *Line) Motion(ctx context.Context, item string) (line.Motion, error) {
	k := KeysFor(item)
	v, err := motionScript.Run(ctx, l.rdb, []string{k.Head, k.Waiting, k.Admitted, k.Pace, k.Paced}).Slice()
	if err != nil {
		return line.Motion{}, fmt.Errorf("motion of %s: %w", item, err)
	}
	if len(v) < 4 {
		return line.Motion{}, fmt.Errorf("motion of %s: script returned %d values", item, len(v))
	}
	m := line.Motion{}
	m.Head, _ = v[0].(int64)
	m.WaitingTotal, _ = v[1].(int64)
	m.AdmittedLastMinute, _ = v[2].(int64)
	m.Active, _ = v[3].(int64)
	if len(v) > 4 {
		oldest, _ := v[4].(string)
		m.PacedSinceMs = pacedMs(oldest)
	}
	return m, nil
}

// Waiting returns the tokenIds of item's line in order, from the front; at
// most limit of them (limit <= 0: all).
func (l *Line) Waiting(ctx context.Context, item string, limit int64) ([]string, error) {
	stop := limit - 1
	if limit <= 0 {
		stop = -1
	}
	ids, err := l.rdb.ZRange(ctx, KeysFor(item).Waiting, 0, stop).Result()
	if err != nil {
		return nil, fmt.Errorf("waiting of %s: %w", item, err)
	}
	return ids, nil
}

// Rewind moves item's applied offset on partition back to just before from,
// so the ops from there on run again instead of being replays: the consumer
// retries records Redis refused this way. It changes nothing and answers false
// when the stored offset is beyond upTo (a newer write owns it).
func (l *Line) Rewind(ctx context.Context, item string, partition int32, from, upTo int64) (bool, error) {
	n, err := rewindScript.Run(ctx, l.rdb, []string{KeysFor(item).Applied}, strconv.FormatInt(int64(partition), 10),
		strconv.FormatInt(from, 10), strconv.FormatInt(upTo, 10), strconv.FormatInt(from-1, 10)).Int()
	if err != nil {
		return false, fmt.Errorf("rewind %s partition %d to %d: %w", item, partition, from, err)
	}
	return n == 1, nil
}
