package dlq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/topics"
	"golang.org/x/time/rate"
)

// Group returns the consumer group in which replays of dlqTopic remember how
// far they got. The CLI and the admin API share it, so a record replayed by
// one is not replayed again by the other.
func Group(dlqTopic string) string { return "waitroom-dlq-replay-" + dlqTopic }

// ReplayOptions say what a replay republishes.
type ReplayOptions struct {
	Filter
	// DryRun reports what would be replayed; nothing is published or remembered.
	DryRun bool
	// Rate caps republished records per second; 0 publishes as fast as Kafka acks.
	Rate float64
	// Force republishes records that still fail the contract's check (Check),
	// for a consumer that learnt to read them since.
	Force bool
	// Reset ignores the remembered position: every record from the start (or
	// Since) is considered again, including ones replayed before. Copies that
	// failed again are still passed over, except the first copy of a letter
	// the run does not read (gone with retention, or before Since), which is
	// replayed in its stead.
	Reset bool
}

// Actions of an Outcome.
const (
	ActionReplayed    = "replayed"
	ActionWouldReplay = "would-replay"
	ActionStillBad    = "still-invalid"
	ActionFailedAgain = "failed-again"
)

// Outcome is what a replay did with one dead letter.
type Outcome struct {
	Entry     string `json:"entry"` // partition/offset in the DLQ
	Key       string `json:"key"`
	ErrorType string `json:"errorType"`
	Source    string `json:"source"` // where the original record was: topic/partition/offset
	Action    string `json:"action"`
	Reason    string `json:"reason,omitempty"` // why a still-invalid record was kept back
	To        string `json:"to,omitempty"`     // topic/partition/offset of the republished record
}

// Report is the summary of a replay.
type Report struct {
	Topic  string `json:"topic"`
	Group  string `json:"group"`
	DryRun bool   `json:"dryRun"`
	// Examined counts the letters read past the remembered position.
	Examined int `json:"examined"`
	// Replayed counts the letters republished (on a dry run: that would be).
	Replayed int `json:"replayed"`
	// StillInvalid counts letters kept back: they fail the contract's check as
	// they are and would only come back (Force republishes them anyway).
	StillInvalid int `json:"stillInvalid"`
	// NotMatched counts letters passed over because the filters left them out.
	NotMatched int `json:"notMatched"`
	// FailedAgain counts letters passed over because they are a replay that
	// failed again (a replayed-from header): the letter they came from is
	// what a replay sends, so no run sends a failure twice. Reset sends the
	// letter again once its cause is fixed.
	FailedAgain int `json:"failedAgain"`
	// LimitReached: the limit stopped the replay; later letters wait for the next run.
	LimitReached bool `json:"limitReached"`
	// Outcomes has one row per replayed, kept-back or failed-again letter, in the order handled.
	Outcomes []Outcome `json:"outcomes"`
	// Position is, per DLQ partition, the offset the next replay starts from.
	Position map[int32]int64 `json:"position"`
}

// Replayer republishes dead letters to their source topic.
type Replayer struct {
	base []kgo.Opt
	now  func() time.Time
}

// NewReplayer returns a Replayer whose clients start from base (kclient.Opts).
func NewReplayer(base []kgo.Opt) *Replayer { return &Replayer{base: base, now: time.Now} }

// Replay republishes the letters of topic that o selects, oldest first, to the
// source topic with their original key, value and headers (not the DLQ's
// verdict) plus a replayed-from header naming the letter. A record that fails
// again comes back to the DLQ with that header: such a copy is never
// republished (FailedAgain), so replaying is idempotent: a run after a failed
// replay sends nothing, however often it runs. It remembers, by
// committing in the consumer group Group(topic), every letter it has dealt
// with (replayed, kept back or passed over by the filters), so the next run
// starts after them: a second run replays nothing new. Records are published
// at least once: a crash between the broker's ack and the commit replays them
// again, which the consumer absorbs (a registration already in the line is a
// DUPLICATE). Two replays of one topic must not run at once.
//
// On an error the report says what was done before it: Replayed counts the
// records the broker acked.
func (rp *Replayer) Replay(ctx context.Context, topic string, o ReplayOptions) (Report, error) {
	rep := Report{Topic: topic, Group: Group(topic), DryRun: o.DryRun, Outcomes: []Outcome{}, Position: map[int32]int64{}}
	if err := o.Validate(); err != nil {
		return rep, err
	}
	if o.Rate < 0 {
		return rep, fmt.Errorf("%w: rate %v: must be 0 (no limit) or more", ErrBadOptions, o.Rate)
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, rp.base...),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0), kgo.RecordRetries(10))...)
	if err != nil {
		return rep, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	spans, err := replaySpans(ctx, adm, topic, o, &rep)
	if err != nil {
		return rep, err
	}

	per := map[int32][]Entry{}
	if err := read(ctx, rp.base, topic, spans, func(r *kgo.Record) bool {
		per[r.Partition] = append(per[r.Partition], EntryOf(r))
		return true
	}); err != nil {
		return rep, err
	}

	read := map[string]bool{} // every letter this run reads, by Ref
	for _, es := range per {
		for _, e := range es {
			read[e.Ref()] = true
		}
	}
	standIns := map[string]bool{} // origins a copy was replayed for in this run

	j := rp.newJob(cl, adm, &rep, o.Rate)
	for e := range oldestFirst(per) {
		if o.Limit > 0 && rep.Replayed+rep.StillInvalid == o.Limit {
			rep.LimitReached = true
			break
		}
		rep.Examined++
		j.next[e.Partition] = e.Offset + 1
		if !o.Match(e) {
			rep.NotMatched++
			continue
		}
		out := Outcome{Entry: e.ID(), Key: string(e.Key), ErrorType: e.Verdict.ErrorType, Source: e.Verdict.Source()}
		src := SourceOf(topic)
		if out.Action, out.Reason = o.holdBack(e, src, read, standIns); out.Action != "" {
			if out.Action == ActionFailedAgain {
				rep.FailedAgain++
			} else {
				rep.StillInvalid++
			}
			rep.Outcomes = append(rep.Outcomes, out)
			continue
		}
		rep.Replayed++
		if o.DryRun {
			out.Action = ActionWouldReplay
			rep.Outcomes = append(rep.Outcomes, out)
			continue
		}
		out.Action = ActionReplayed
		rep.Outcomes = append(rep.Outcomes, out)
		if err := j.publish(ctx, replayRecord(src, e), len(rep.Outcomes)-1); err != nil {
			return rep, j.stopped(ctx, err)
		}
	}
	if o.DryRun {
		return rep, nil
	}
	if err := j.flush(ctx); err != nil {
		return rep, j.stopped(ctx, err)
	}
	return rep, j.commit(ctx, j.next)
}

// holdBack says why letter e is not replayed to src ("" when it is): a copy
// of a replay that failed again (unless --reset finds its letter gone: then
// it stands in, once, noted in standIns), or a record that still does not
// pass src's checks (unless forced) or names another source. read holds
// every letter this run reads, by Ref.
func (o ReplayOptions) holdBack(e Entry, src string, read, standIns map[string]bool) (action, reason string) {
	if from := e.Verdict.ReplayedFrom; from != "" {
		if !o.Reset || read[from] || standIns[from] {
			return ActionFailedAgain, "a replay of " + from + " that failed again; replay that letter with --reset once the cause is fixed"
		}
		standIns[from] = true // its letter is gone: this copy stands in, once
	}
	cerr := Check(src, e.Key, e.Value)
	if e.Verdict.SourceTopic != "" && e.Verdict.SourceTopic != src {
		cerr = fmt.Errorf("its source-topic header says %q, not %q: replay it by hand", e.Verdict.SourceTopic, src)
	} else if o.Force {
		cerr = nil
	}
	if cerr != nil {
		return ActionStillBad, cerr.Error()
	}
	return "", ""
}

// replaySpans are the offsets of topic a replay reads (since o.Since), each
// partition's starting after the group's committed position unless o.Reset;
// the positions are noted in rep.
func replaySpans(ctx context.Context, adm *kadm.Client, topic string, o ReplayOptions, rep *Report) (map[int32]span, error) {
	spans, err := spansOf(ctx, adm, topic, o.Since)
	if err != nil {
		return nil, err
	}
	committed, err := adm.FetchOffsets(ctx, rep.Group)
	if errors.Is(err, kerr.GroupIDNotFound) { // never replayed: no position yet
		committed, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the position of group %s: %w", rep.Group, err)
	}
	for p, s := range spans {
		if c, ok := committed.Lookup(topic, p); ok && c.Err == nil && c.At >= 0 {
			rep.Position[p] = c.At
			if !o.Reset && c.At > s.from {
				s.from = min(c.At, s.to)
				spans[p] = s
			}
		}
	}
	return spans, nil
}

// newJob starts a replay's publishing, at rate records a second (0: no limit).
func (rp *Replayer) newJob(cl *kgo.Client, adm *kadm.Client, rep *Report, r float64) *replayJob {
	j := &replayJob{rp: rp, cl: cl, adm: adm, rep: rep, next: map[int32]int64{}, lastCommit: rp.now(), chunk: 500}
	if r > 0 {
		j.pace = rate.NewLimiter(rate.Limit(r), 1) // evenly spaced, no burst
		j.chunk = max(1, min(500, int(r/10)))      // about ten flushes a second
	}
	return j
}

// replayJob is one replay's publishing state: the records waiting for a
// produce, and the position to commit once they are acked.
type replayJob struct {
	rp         *Replayer
	cl         *kgo.Client
	adm        *kadm.Client
	rep        *Report
	pace       *rate.Limiter // nil: no rate limit
	chunk      int
	pending    []*kgo.Record
	rows       []int           // the Outcome row of each pending record
	next       map[int32]int64 // partition -> offset after the last letter dealt with
	acked      map[int32]int64 // next as of the last flush: safe to commit
	lastCommit time.Time
}

func (j *replayJob) publish(ctx context.Context, r *kgo.Record, row int) error {
	if j.pace != nil {
		if err := j.pace.Wait(ctx); err != nil {
			return fmt.Errorf("replay stopped: %w", err)
		}
	}
	j.pending, j.rows = append(j.pending, r), append(j.rows, row)
	if len(j.pending) < j.chunk {
		return nil
	}
	if err := j.flush(ctx); err != nil {
		return err
	}
	if j.rp.now().Sub(j.lastCommit) < time.Second {
		return nil
	}
	return j.commit(ctx, j.acked)
}

// flush produces the pending records and waits for the broker's acks.
func (j *replayJob) flush(ctx context.Context) error {
	if len(j.pending) == 0 {
		return nil
	}
	res := j.cl.ProduceSync(ctx, j.pending...)
	for i, pr := range res {
		if pr.Err == nil {
			j.rep.Outcomes[j.rows[i]].To = pr.Record.Topic + "/" + strconv.Itoa(int(pr.Record.Partition)) + "/" + strconv.FormatInt(pr.Record.Offset, 10)
		}
	}
	if err := res.FirstErr(); err != nil {
		// Nothing of this chunk is remembered: a next run publishes it again.
		return fmt.Errorf("republish %d records: %w", len(j.pending), err)
	}
	j.pending, j.rows = j.pending[:0], j.rows[:0]
	j.acked = maps.Clone(j.next)
	return nil
}

// commit remembers the position pos (next or acked: nothing before it pending).
func (j *replayJob) commit(ctx context.Context, pos map[int32]int64) error {
	if len(pos) == 0 {
		return nil
	}
	os := kadm.Offsets{}
	for _, p := range slices.Sorted(maps.Keys(pos)) {
		os.Add(kadm.Offset{Topic: j.rep.Topic, Partition: p, At: pos[p], LeaderEpoch: -1})
	}
	if err := j.adm.CommitAllOffsets(ctx, j.rep.Group, os); err != nil {
		return fmt.Errorf("remember the replay position in group %s (the records were published; a next run publishes them again): %w", j.rep.Group, err)
	}
	maps.Copy(j.rep.Position, pos)
	j.lastCommit = j.rp.now()
	return nil
}

// stopped remembers what was acked before err stopped the replay (even when
// err is the context ending), so a next run does not publish it again.
func (j *replayJob) stopped(ctx context.Context, err error) error {
	j.rep.Replayed = 0 // count what the broker acked, not what was queued
	for _, o := range j.rep.Outcomes {
		if o.Action == ActionReplayed && o.To != "" {
			j.rep.Replayed++
		}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if cerr := j.commit(cctx, j.acked); cerr != nil {
		return errors.Join(err, cerr)
	}
	return fmt.Errorf("%w (what was acked before is remembered: run the replay again for the rest)", err)
}

// replayRecord is the record a replay of e publishes to source.
func replayRecord(source string, e Entry) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(e.Extra)+1)
	for _, h := range e.Extra {
		if !verdictHeaders[h.Key] {
			hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
		}
	}
	hs = append(hs, kgo.RecordHeader{Key: topics.HeaderReplayedFrom, Value: []byte(e.Ref())})
	return &kgo.Record{Topic: source, Key: e.Key, Value: e.Value, Headers: hs}
}

// oldestFirst yields the letters of every partition merged by the time they
// were written, each partition's in offset order, so a limit keeps the
// oldest and each partition's handled letters form a prefix.
func oldestFirst(per map[int32][]Entry) func(yield func(Entry) bool) {
	return func(yield func(Entry) bool) {
		heads := map[int32]int{}
		for {
			best := int32(-1)
			for p, es := range per {
				i := heads[p]
				if i >= len(es) {
					continue
				}
				if best < 0 || byAge(es[i], per[best][heads[best]]) < 0 {
					best = p
				}
			}
			if best < 0 {
				return
			}
			e := per[best][heads[best]]
			heads[best]++
			if !yield(e) {
				return
			}
		}
	}
}

// Check runs the contract's strict decoder of source over a record, the test
// the consumer applies first: a record that fails it would come straight back
// to the DLQ. What only the consumer can judge (an unknown item, a refusal by
// Redis) passes. Records of other sources pass.
func Check(source string, key, value []byte) error {
	var item string
	var err error
	switch source {
	case topics.Registrations:
		var ev topics.RegistrationEvent
		ev, err = topics.DecodeRegistration(value)
		item = ev.ItemID
	case topics.Items:
		if value == nil { // a tombstone
			if !topics.ValidID(string(key)) {
				return fmt.Errorf("%w: tombstone with key %q", topics.ErrInvalid, key)
			}
			return nil
		}
		var s topics.ItemState
		s, err = topics.DecodeItem(value)
		item = s.ItemID
	case topics.Admissions:
		_, err = topics.DecodeAdmission(value)
		return err
	default:
		return nil
	}
	if err == nil && string(key) != item {
		err = fmt.Errorf("%w: record key %q differs from itemId %q", topics.ErrInvalid, key, item)
	}
	return err
}
