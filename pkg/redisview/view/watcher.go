package view

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Record tells the least the view must have applied: per "topic/partition",
// an offset the marker's applied offset must reach (what the record knows was
// applied, such as the consumer group's committed offsets). A view behind it
// is older than the record.
type Record interface {
	Floor(ctx context.Context) (map[string]int64, error)
}

// Settler is a Record that can look at what a view has not applied yet:
// Settle returns floor lowered to applied (per topic-partition) where the
// offsets from applied to floor hold nothing the view must apply, and floor
// as it is elsewhere, also with its error (where it could not look). The
// Watcher calls it only for a view that looks behind floor.
type Settler interface {
	Settle(ctx context.Context, applied, floor map[string]int64) (map[string]int64, error)
}

// Status is the Watcher's verdict on the view.
type Status struct {
	Trusted bool
	// Reason says why the view is not trusted (empty when it is).
	Reason string
	// Cause is a short word for metrics: empty, rebuilding, behind, unchecked.
	Cause   string
	Gen     string
	Writes  int64 // the highest advance count seen of Gen
	Checked time.Time
	// Registry is the view's items and their tokens (items.go), as of the
	// last check of a trusted view.
	Registry map[string]string
	// Lost are the items not trusted while the view is: their node lost or
	// rolled back their keys; each answers VIEW_REBUILDING until rebuilt.
	Lost map[string]LostItem
}

// Options of a Watcher.
type Options struct {
	// Interval between checks (WR_VIEW_CHECK_INTERVAL, default 250 ms).
	Interval time.Duration
	// Record, when set, also compares the applied offsets with the record.
	Record Record
	// ItemsPerCheck bounds the items whose own marker one check reads (one
	// MGET of four keys each, pipelined per node; default 2000): with more items, each
	// check reads the next ones in turn, so a loss is found within
	// ceil(items/ItemsPerCheck) intervals.
	ItemsPerCheck int
}

// Watcher checks the marker at start and every Interval. Its verdict gates
// every answer that reads the view. A nil *Watcher always trusts the view.
type Watcher struct {
	rdb redis.Cmdable
	opt Options
	log *zap.Logger
	m   *metrics

	st      atomic.Pointer[Status]
	badGen  atomic.Pointer[string] // a generation seen rolled back: never trusted again
	mu      sync.Mutex
	waiters []chan struct{}
	seqs    map[string]seqSeen // per item, the highest seq, head and changes seen of its token (judge's goroutine only)
	cursor  int                // where the next check's items start, when they are more than ItemsPerCheck
}

type seqSeen struct {
	token              string
	seq, head, changes int64
}

// NewWatcher returns a Watcher of the view in rdb; its metrics go on reg
// (nil: not registered). It distrusts the view until its first check.
func NewWatcher(rdb redis.Cmdable, o Options, reg prometheus.Registerer, log *zap.Logger) *Watcher {
	if o.Interval <= 0 {
		o.Interval = 250 * time.Millisecond
	}
	if o.ItemsPerCheck <= 0 {
		o.ItemsPerCheck = 2000
	}
	w := &Watcher{rdb: rdb, opt: o, log: log, m: newMetrics(reg)}
	w.st.Store(&Status{Reason: "the view has not been checked yet", Cause: "unchecked"})
	w.m.trusted.Set(0)
	return w
}

// Interval is the time between two checks.
func (w *Watcher) Interval() time.Duration { return w.opt.Interval }

// Status is the last verdict.
func (w *Watcher) Status() Status {
	if w == nil {
		return Status{Trusted: true}
	}
	return *w.st.Load()
}

// Trusted reports the last verdict and, when false, why.
func (w *Watcher) Trusted() (bool, string) {
	s := w.Status()
	return s.Trusted, s.Reason
}

// Run checks until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.opt.Interval)
	defer t.Stop()
	for {
		w.Check(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Check reads the marker (and the record, when set) now and stores the
// verdict. A Redis that does not answer keeps the last verdict: whatever
// reads the view fails on its own then.
func (w *Watcher) Check(ctx context.Context) Status {
	s, err := w.judge(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("check the view marker", zap.Error(err))
		}
		return w.Status()
	}
	w.set(s)
	return s
}

func (w *Watcher) judge(ctx context.Context) (Status, error) {
	now := time.Now()
	// The verdict to compare with is taken before the marker is read: the
	// count only grows, so whatever was seen before the read (by an earlier
	// check or a Confirm) must be at most what the read finds. Taken after,
	// a Confirm racing the read could record a newer count than the read saw,
	// and a healthy view would look rolled back (and stay distrusted).
	prev := w.Status()
	m, ok, at, err := readAt(ctx, w.rdb)
	if err != nil {
		return Status{}, err
	}
	if !ok {
		return Status{Reason: "the Redis view is empty (no marker " + MarkerKey + "): it is rebuilt from Kafka", Cause: "empty", Checked: now}, nil
	}
	if m.State != Ready {
		r := "the Redis view is being rebuilt from Kafka"
		switch {
		case strings.HasPrefix(m.Reason, r):
			r = m.Reason // a rebuild started for this verdict: say it once
		case m.Reason != "":
			r += ": " + m.Reason
		}
		return Status{Reason: r, Cause: "rebuilding", Gen: m.Gen, Checked: now}, nil
	}
	if st, changed := w.judgeNode(ctx, m, at, now); changed {
		return st, nil
	}
	if w.opt.Record != nil {
		var behind string
		if m, behind, err = w.behindRecord(ctx); err != nil {
			return Status{}, err
		}
		if behind != "" {
			return Status{Reason: "the Redis view is older than the record: " + behind, Cause: "behind", Gen: m.Gen, Checked: now}, nil
		}
	}
	if b := w.badGen.Load(); b != nil && *b == m.Gen {
		return Status{Reason: "the Redis view was rolled back (generation " + m.Gen + "): it is rebuilt from Kafka", Cause: "behind", Gen: m.Gen, Checked: now}, nil
	}
	if prev.Gen == m.Gen && m.Writes < prev.Writes {
		g := m.Gen
		w.badGen.Store(&g)
		reason := fmt.Sprintf("the Redis view was rolled back: generation %s had %d writes, now %d", m.Gen, prev.Writes, m.Writes)
		// Say so in the marker too: the services that saw no higher count
		// (the consumer among them, which rebuilds) must not go on trusting it.
		if err := Stale(ctx, w.rdb, reason); err != nil {
			w.log.Warn("mark the rolled-back view stale", zap.Error(err))
		}
		return Status{Reason: reason, Cause: "behind", Gen: m.Gen, Writes: prev.Writes, Checked: now}, nil
	}
	s := Status{Trusted: true, Gen: m.Gen, Writes: m.Writes, Checked: now}
	w.judgeItems(ctx, &s, prev)
	return s, nil
}

// behindRecord reads the record's floor, then the marker again (an apply
// between the two reads must not look like a rollback), and describes where
// the view is behind the floor ("" when it is not). Only a view that looks
// behind costs more: a Record that is a Settler then looks at the offsets
// the view has not applied, and what holds nothing to apply (transaction
// markers, aborted events) is not behind. A Settler that fails leaves the
// floor where it could not look (logged): the view is judged behind there.
func (w *Watcher) behindRecord(ctx context.Context) (Marker, string, error) {
	floor, err := w.opt.Record.Floor(ctx)
	if err != nil {
		return Marker{}, "", fmt.Errorf("read the record's offsets: %w", err)
	}
	m, ok, err := Read(ctx, w.rdb)
	if err != nil || !ok {
		return Marker{}, "", fmt.Errorf("re-read the view marker (found %v): %w", ok, err)
	}
	behind := Behind(m.Applied, floor)
	if s, ok := w.opt.Record.(Settler); ok && behind != "" {
		floor, err = s.Settle(ctx, m.Applied, floor)
		if err != nil {
			if ctx.Err() != nil {
				return Marker{}, "", fmt.Errorf("read what the view has not applied: %w", err)
			}
			w.log.Warn("read what the view has not applied; judged behind where unread", zap.Error(err))
		}
		behind = Behind(m.Applied, floor)
	}
	return m, behind, nil
}

// judgeNode compares the node a ready view was made ready on with the node
// answering (node.go). Another node is a loss until proved otherwise: the
// view is marked stale (only if it still names the old node: one rebuild
// per change, however many services find it) and changed is true. A marker
// that names no node (made by a version before the check), or the same
// master under a new replication ID, is armed with the node answering.
func (w *Watcher) judgeNode(ctx context.Context, m Marker, at node, now time.Time) (st Status, changed bool) {
	v := judgeNodeID(m.Node, at)
	if v == sameNode {
		return Status{}, false
	}
	if v == rearmNode || m.Node == "" {
		if err := armNodeScript.Run(ctx, w.rdb, []string{MarkerKey}, m.Node, at.id()).Err(); err != nil {
			w.log.Warn("record the view's node on its marker", zap.Error(err))
		}
		return Status{}, false
	}
	reason := nodeChanged(m.Gen, m.Node, at) + ": it is rebuilt from Kafka"
	if err := staleNodeScript.Run(ctx, w.rdb, []string{MarkerKey}, m.Node, reason).Err(); err != nil {
		w.log.Warn("mark the view stale after a change of node", zap.Error(err))
	}
	return Status{Reason: reason, Cause: "behind", Gen: m.Gen, Checked: now}, true
}

// judgeItems finds the items of a trusted view whose own node lost or rolled
// back their keys (items.go), marks them lost in Redis (the first to find
// one says since when) and lists them in s. A registry that cannot be read
// keeps the last verdict on the items.
func (w *Watcher) judgeItems(ctx context.Context, s *Status, prev Status) {
	reg, lost, err := ReadItems(ctx, w.rdb)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("read the view's items", zap.Error(err))
		}
		s.Registry, s.Lost = prev.Registry, prev.Lost
		return
	}
	ids := make([]string, 0, len(reg))
	for it := range reg {
		if _, ok := lost[it]; !ok {
			ids = append(ids, it)
		}
	}
	if n := w.opt.ItemsPerCheck; len(ids) > n {
		sort.Strings(ids)
		from := w.cursor % len(ids)
		w.cursor = from + n
		ids = append(ids[from:min(from+n, len(ids))], ids[:max(0, from+n-len(ids))]...)
	}
	pr := probeItems(ctx, w.rdb, ids)
	if w.seqs == nil {
		w.seqs = map[string]seqSeen{}
	}
	for it := range w.seqs {
		if _, ok := reg[it]; !ok {
			delete(w.seqs, it)
		}
	}
	for _, it := range ids {
		p, ok := pr[it]
		if !ok {
			continue // its node does not answer: the item's reads fail on their own
		}
		var why string
		seen := w.seqs[it]
		switch {
		case p.token == "":
			why = "the Redis node of item " + it + " lost its keys (no " + ItemKey(it) + "): the item is rebuilt from Kafka"
		case p.token != reg[it]:
			why = fmt.Sprintf("the Redis node of item %s holds another incarnation of it (%s, the view has %s): the item is rebuilt from Kafka", it, p.token, reg[it])
		case seen.token == p.token && p.seq < seen.seq:
			why = fmt.Sprintf("the Redis node of item %s was rolled back (seq %d, seen %d): the item is rebuilt from Kafka", it, p.seq, seen.seq)
		case seen.token == p.token && p.head < seen.head:
			why = fmt.Sprintf("the Redis node of item %s was rolled back (head %d, seen %d: admissions undone): the item is rebuilt from Kafka", it, p.head, seen.head)
		case seen.token == p.token && p.changes < seen.changes:
			why = fmt.Sprintf("the Redis node of item %s was rolled back (changes %d, seen %d: leaves, completions, abandons or state changes undone): the item is rebuilt from Kafka", it, p.changes, seen.changes)
		default:
			if seen.token != p.token {
				w.seqs[it] = seqSeen{p.token, p.seq, p.head, p.changes}
			} else if p.seq > seen.seq || p.head > seen.head || p.changes > seen.changes {
				w.seqs[it] = seqSeen{p.token, max(p.seq, seen.seq), max(p.head, seen.head), max(p.changes, seen.changes)}
			}
			continue
		}
		if err := MarkLost(ctx, w.rdb, it, why, s.Checked); err != nil {
			w.log.Warn("mark an item lost", zap.String("item", it), zap.Error(err))
		}
		lost[it] = LostItem{Since: s.Checked.UnixMilli(), State: ItemLost, Reason: why}
	}
	s.Registry, s.Lost = reg, lost
}

// Item reports whether answers about item may be read from the view: the
// view is trusted and the item is not lost. When not, reason says why.
func (w *Watcher) Item(item string) (ok bool, reason string) {
	s := w.Status()
	if !s.Trusted {
		return false, s.Reason
	}
	if li, lost := s.Lost[item]; lost {
		return false, li.Describe()
	}
	return true, ""
}

// Describe says what is happening to a lost item.
func (l LostItem) Describe() string {
	r := l.Reason
	switch l.State {
	case ItemRebuilding:
		r += " (rebuilding since " + l.SinceTime().UTC().Format(time.RFC3339) + ")"
	case ItemRebuilt:
		r += " (rebuilt; applying the registrations made meanwhile)"
	default:
		r += " (lost since " + l.SinceTime().UTC().Format(time.RFC3339) + ")"
	}
	return r
}

// ItemGen names the incarnation of item answers are read from: the view's
// generation and the item's token. It changes when either is rebuilt, so a
// cache of answers keyed by it never outlives the line it was read from.
func (w *Watcher) ItemGen(item string) ItemGen {
	s := w.Status()
	return ItemGen{View: s.Gen, Item: s.Registry[item]}
}

// ItemGen is what Watcher.ItemGen names: comparable with ==, and made
// without joining its two strings (it is read at every status read).
type ItemGen struct{ View, Item string }

// Usable returns the items of items that may be read from the view (not
// lost), reusing items' array.
func (w *Watcher) Usable(items []string) []string {
	if w == nil {
		return items
	}
	s := w.Status()
	if len(s.Lost) == 0 {
		return items
	}
	out := items[:0:0]
	for _, it := range items {
		if _, lost := s.Lost[it]; !lost {
			out = append(out, it)
		}
	}
	return out
}

// ConfirmItem is Confirm for a read of item's line: the view is still the
// trusted generation, and item's own marker still carries the token the
// view registered (a node restarted empty a moment ago is refused, not
// answered from). A missing marker marks the item lost at once.
func (w *Watcher) ConfirmItem(ctx context.Context, item string) error {
	if w == nil {
		return nil
	}
	s := w.Status()
	if !s.Trusted {
		return ErrNotTrusted
	}
	if _, lost := s.Lost[item]; lost {
		return ErrNotTrusted
	}
	want, registered := s.Registry[item]
	var m *redis.SliceCmd
	var tok *redis.StringCmd
	_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		m = p.HMGet(ctx, MarkerKey, confirmFields...)
		tok = p.Get(ctx, ItemKey(item))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("confirm the view marker of %s: %w", item, err)
	}
	if _, err := confirmed(m.Val(), s.Gen, s.Writes); err != nil {
		return err
	}
	if !registered {
		return nil // not applied yet when last checked (or new): nothing to lose
	}
	got := tok.Val()
	if got == "" {
		why := "the Redis node of item " + item + " lost its keys (no " + ItemKey(item) + "): the item is rebuilt from Kafka"
		if err := MarkLost(ctx, w.rdb, item, why, time.Now()); err != nil {
			w.log.Warn("mark an item lost", zap.String("item", item), zap.Error(err))
		}
		return ErrNotTrusted
	}
	if got != want {
		return ErrNotTrusted // rebuilt since the last check (or another incarnation): the next check says which
	}
	return nil
}

// Rebuilding lists the lost items, oldest loss first (for /readyz and the
// console).
func (w *Watcher) Rebuilding() []ItemRebuild {
	s := w.Status()
	out := make([]ItemRebuild, 0, len(s.Lost))
	for it, li := range s.Lost {
		out = append(out, ItemRebuild{Item: it, State: li.State, Since: li.SinceTime().UTC(), Records: li.Records, Left: li.Left, Reason: li.Reason})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Since.Equal(out[j].Since) {
			return out[i].Since.Before(out[j].Since)
		}
		return out[i].Item < out[j].Item
	})
	return out
}

// ItemRebuild is one lost item as /readyz shows it.
type ItemRebuild struct {
	Item  string    `json:"item"`
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// Records the rebuild replays (0 until it has listed the topics) and
	// Left the ones it has not replayed yet.
	Records int64  `json:"records"`
	Left    int64  `json:"left"`
	Reason  string `json:"reason"`
}

// Behind describes the first topic-partition where applied is below floor,
// or returns "".
func Behind(applied, floor map[string]int64) string {
	keys := make([]string, 0, len(floor))
	for k := range floor {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if f := floor[k]; f > 0 && applied[k] < f {
			return fmt.Sprintf("%s applied up to offset %d, the record has %d", k, applied[k], f)
		}
	}
	return ""
}

func (w *Watcher) set(s Status) {
	old := w.st.Swap(&s)
	w.m.lost.Set(float64(len(s.Lost)))
	for it, li := range s.Lost {
		if _, was := old.Lost[it]; !was {
			w.log.Error("item lost: answering VIEW_REBUILDING for it until it is rebuilt", zap.String("item", it), zap.String("reason", li.Reason))
		}
	}
	for it := range old.Lost {
		if _, still := s.Lost[it]; !still && s.Trusted {
			w.log.Info("item trusted again", zap.String("item", it))
		}
	}
	if s.Trusted {
		w.m.trusted.Set(1)
	} else {
		w.m.trusted.Set(0)
	}
	switch {
	case !s.Trusted && (old.Trusted || old.Cause != s.Cause):
		w.m.distrust.WithLabelValues(s.Cause).Inc()
		w.log.Error("view not trusted: answering VIEW_REBUILDING until it is rebuilt", zap.String("cause", s.Cause), zap.String("reason", s.Reason), zap.String("gen", s.Gen))
	case s.Trusted && !old.Trusted:
		w.log.Info("view trusted", zap.String("gen", s.Gen))
	}
	if s.Trusted {
		w.mu.Lock()
		for _, c := range w.waiters {
			close(c)
		}
		w.waiters = nil
		w.mu.Unlock()
	}
}

// Wait blocks until the view is trusted (after a check) or ctx ends. A nil
// Watcher returns at once.
func (w *Watcher) Wait(ctx context.Context) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	if w.st.Load().Trusted {
		w.mu.Unlock()
		return nil
	}
	c := make(chan struct{})
	w.waiters = append(w.waiters, c)
	w.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for a trusted view: %w", ctx.Err())
	}
}

type metrics struct {
	lost     prometheus.Gauge
	trusted  prometheus.Gauge
	distrust *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		lost: prometheus.NewGauge(prometheus.GaugeOpts{Name: "waitroom_view_items_lost",
			Help: "Items of a trusted view whose own Redis node lost or rolled back their keys, until rebuilt (each answers VIEW_REBUILDING)."}),
		trusted: prometheus.NewGauge(prometheus.GaugeOpts{Name: "waitroom_view_trusted",
			Help: "1 while the Redis view is trusted; 0 while it is empty, older than the record or being rebuilt (answers are VIEW_REBUILDING)."}),
		distrust: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "waitroom_view_distrusted_total",
			Help: "Times the view stopped being trusted, by cause (empty, rebuilding, behind)."}, []string{"cause"}),
	}
	if reg != nil {
		reg.MustRegister(m.trusted, m.distrust, m.lost)
	}
	return m
}

// Confirm checks that the view just read is the generation this Watcher
// trusts (see the package function Confirm). A nil Watcher confirms anything.
func (w *Watcher) Confirm(ctx context.Context) error {
	if w == nil {
		return nil
	}
	s := w.Status()
	if !s.Trusted {
		return ErrNotTrusted
	}
	n, _, err := confirm(ctx, w.rdb, s.Gen, s.Writes)
	if err == nil {
		w.saw(s.Gen, n)
	}
	return err
}

// saw remembers n, a write count read from (or just written to) the marker
// of generation gen: a Redis restored to before it is refused by the next
// Confirm, not only after the next check.
func (w *Watcher) saw(gen string, n int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur := w.st.Load(); cur.Trusted && cur.Gen == gen && n > cur.Writes {
		up := *cur
		up.Writes = n
		w.st.Store(&up)
	}
}

// Touch counts a write this service is about to make to the view (or has
// just made: see the package function Touch), and remembers the count it
// reached, so that a Redis restored to before this write is refused by this
// service's next Confirm (Redis replicates in order: a replica that has the
// count has every write made before it). A nil Watcher does nothing.
func (w *Watcher) Touch(ctx context.Context) error {
	if w == nil {
		return nil
	}
	s, ok := w.rdb.(redis.Scripter)
	if !ok {
		return nil
	}
	gen := w.Status().Gen
	n, err := touchScript.Eval(ctx, s, []string{MarkerKey}).Int64()
	if err != nil {
		return fmt.Errorf("count a write on the view marker: %w", err)
	}
	w.saw(gen, n)
	return nil
}

// Missing reads, in one pipelined round, the own marker of each of items the
// view lists and that is not known lost, and returns those whose marker is
// gone (their node restarted empty since the last check), marking them lost
// at once. Writers call it right before writing to the items' lines, so a
// line lost a moment ago is not written afresh (nor admitted from) in the
// interval before the next check. A nil Watcher finds nothing missing.
func (w *Watcher) Missing(ctx context.Context, items []string) ([]string, error) {
	if w == nil {
		return nil, nil
	}
	s := w.Status()
	var ask []string
	for _, it := range items {
		if _, ok := s.Registry[it]; !ok {
			continue
		}
		if _, lost := s.Lost[it]; !lost {
			ask = append(ask, it)
		}
	}
	if len(ask) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.IntCmd, len(ask))
	// An item whose node does not answer is not judged: its write fails on
	// its own, and the other items' go on.
	_, _ = w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range ask {
			cmds[i] = p.Exists(ctx, ItemKey(it))
		}
		return nil
	})
	var missing []string
	for i, it := range ask {
		if cmds[i].Err() == nil && cmds[i].Val() == 0 {
			why := "the Redis node of item " + it + " lost its keys (no " + ItemKey(it) + "): the item is rebuilt from Kafka"
			if err := MarkLost(ctx, w.rdb, it, why, time.Now()); err != nil {
				return nil, err
			}
			missing = append(missing, it)
		}
	}
	return missing, nil
}
