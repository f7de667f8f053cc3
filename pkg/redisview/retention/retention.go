// Package retention checks that Kafka still holds every record a rebuild of
// the Redis view needs: the register record of every live entry (waiting or
// admitted) on waitroom.registrations, and the admission event of every live
// admission on waitroom.admissions, but for the entries the latest complete
// snapshot of their line holds (waitroom.snapshots), whose records after the
// snapshot are needed instead. A record older than its topic's retention is
// deleted with its segment, and a rebuild would then lose that person.
package retention

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/kafka/kclient"
	"github.com/waitroom/waitroom/pkg/redisview/snapshot"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
)

// Entry is the record one live entry needs.
type Entry struct {
	Item, Token string
	Partition   int32
	Offset      int64
	At          time.Time // the record's timestamp: what retention counts from
}

// Topic is what one topic holds for the live entries.
type Topic struct {
	Topic string
	// Retention is the topic's retention.ms; 0 when unlimited (-1).
	Retention time.Duration
	// Needed is how many live entries need a record of this topic.
	Needed int
	// Oldest is the oldest record a live entry needs (nil when none is needed or found).
	Oldest *Entry
	// Missing is how many live entries have no record left (deleted);
	// MissingExample names one as "item/token".
	Missing        int
	MissingExample string
}

// Age is how old the oldest needed record is at now (0 when none).
func (t Topic) Age(now time.Time) time.Duration {
	if t.Oldest == nil {
		return 0
	}
	return now.Sub(t.Oldest.At)
}

// Report is the outcome of Check.
type Report struct {
	At            time.Time
	Items         int // items with a live line
	Registrations Topic
	Admissions    Topic
	// Snapshots is how many items with a live line have a complete snapshot
	// (their entries in it need no record); OldestSnapshot the item whose
	// latest one is the oldest, taken at OldestSnapshotAt.
	Snapshots        int
	OldestSnapshot   string
	OldestSnapshotAt time.Time
	// tails are, per snapshotted item, the first registrations offset after
	// its snapshot, by partition (what a rebuild replays from).
	tails map[string]map[int32]int64
	// Warnings: a rebuild is complete today but may not stay so.
	Warnings []string
	// Failures: a rebuild now would be incomplete.
	Failures []string
}

// Complete reports whether a rebuild now would find every record it needs.
func (r Report) Complete() bool { return len(r.Failures) == 0 }

// Checker reads topic configs and records with clients built from base, and
// the lines from rdb.
type Checker struct {
	base []kgo.Opt
	rdb  redis.UniversalClient
}

// New returns a Checker.
func New(base []kgo.Opt, rdb redis.UniversalClient) *Checker { return &Checker{base: base, rdb: rdb} }

// live is every live entry of every active item: item -> token -> true when
// admitted (its admission is live), false when waiting.
type live map[string]map[string]bool

// Check compares the retention of waitroom.registrations and
// waitroom.admissions with the records the live entries at now need. It
// reads both topics from their start until every live entry's record is
// found (as a rebuild would), so its cost grows with what the topics hold.
func (c *Checker) Check(ctx context.Context, now time.Time) (Report, error) {
	cl, err := kgo.NewClient(c.base...)
	if err != nil {
		return Report{}, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	r := Report{At: now, Registrations: Topic{Topic: topics.Registrations}, Admissions: Topic{Topic: topics.Admissions}}
	if err := retentions(ctx, adm, &r.Registrations, &r.Admissions); err != nil {
		return r, err
	}
	lv, err := c.live(ctx, now)
	if err != nil {
		return r, err
	}
	r.Items = len(lv)
	inSnap := c.covered(ctx, adm, lv, &r)
	if err := c.tailsKept(ctx, adm, &r); err != nil {
		return r, err
	}
	if err := c.scanRegistrations(ctx, adm, lv, inSnap, &r.Registrations); err != nil {
		return r, err
	}
	if err := c.scanAdmissions(ctx, adm, lv, &r.Admissions); err != nil {
		return r, err
	}
	r.judge(now)
	return r, nil
}

func (r *Report) judge(now time.Time) {
	for _, t := range []*Topic{&r.Registrations, &r.Admissions} {
		what := "register record"
		if t.Topic == topics.Admissions {
			what = "admission event"
		}
		if t.Missing > 0 {
			r.Failures = append(r.Failures, fmt.Sprintf(
				"%s: %d of %d live entries have no %s left (deleted by retention; one is %s): a rebuild now would be incomplete",
				t.Topic, t.Missing, t.Needed, what, t.MissingExample))
			continue
		}
		if t.Oldest != nil && t.Retention > 0 && t.Age(now) > t.Retention {
			r.Warnings = append(r.Warnings, fmt.Sprintf(
				"%s: retention %s is shorter than the age %s of the oldest live entry's %s (%s/%s at %d/%d): Kafka may delete it with its segment at any time, and a rebuild would then lose it; raise retention.ms",
				t.Topic, Human(t.Retention), Human(t.Age(now)), what, t.Oldest.Item, t.Oldest.Token, t.Oldest.Partition, t.Oldest.Offset))
		}
	}
	if rr := r.Registrations.Retention; r.OldestSnapshot != "" && rr > 0 && now.Sub(r.OldestSnapshotAt) > rr {
		r.Warnings = append(r.Warnings, fmt.Sprintf(
			"the latest snapshot of %s is %s old, older than %s's retention %s: the records after it may be deleted before the next one (is a consumer writing snapshots? WR_SNAPSHOT_INTERVAL)",
			r.OldestSnapshot, Human(now.Sub(r.OldestSnapshotAt)), topics.Registrations, Human(rr)))
	}
	ra, rr := r.Admissions.Retention, r.Registrations.Retention
	if ra > 0 && (rr == 0 || ra < rr) {
		keep := "forever"
		if rr > 0 {
			keep = Human(rr)
		}
		r.Warnings = append(r.Warnings, fmt.Sprintf(
			"%s keeps %s but %s keeps %s: a rebuild would queue again anyone admitted more than %s ago whose registration is still kept; keep admissions at least as long as registrations",
			topics.Admissions, Human(ra), topics.Registrations, keep, Human(ra)))
	}
}

// Human renders a retention or an age in days and hours ("7d", "2d3h", "45m").
func Human(d time.Duration) string {
	if d < time.Hour {
		return d.Round(time.Second).String()
	}
	days, hours := int64(d/(24*time.Hour)), int64(d%(24*time.Hour)/time.Hour)
	switch {
	case days == 0:
		return strconv.FormatInt(hours, 10) + "h"
	case hours == 0:
		return strconv.FormatInt(days, 10) + "d"
	}
	return strconv.FormatInt(days, 10) + "d" + strconv.FormatInt(hours, 10) + "h"
}

func retentions(ctx context.Context, adm *kadm.Client, ts ...*Topic) error {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Topic
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return fmt.Errorf("describe %v: %w", names, err)
	}
	for _, t := range ts {
		rc, err := rcs.On(t.Topic, nil)
		if err != nil {
			return fmt.Errorf("describe %s: %w", t.Topic, err)
		}
		if rc.Err != nil {
			return fmt.Errorf("describe %s: %w", t.Topic, rc.Err)
		}
		ms := int64(7 * 24 * time.Hour / time.Millisecond) // Kafka's default
		for _, c := range rc.Configs {
			if c.Key == "retention.ms" && c.Value != nil {
				if ms, err = strconv.ParseInt(*c.Value, 10, 64); err != nil {
					return fmt.Errorf("%s retention.ms %q: %w", t.Topic, *c.Value, err)
				}
			}
		}
		if ms > 0 {
			t.Retention = time.Duration(ms) * time.Millisecond
		}
	}
	return nil
}

// scanCount is how many elements one SCAN step asks for.
const scanCount = 10000

func (c *Checker) live(ctx context.Context, now time.Time) (live, error) {
	items, err := c.rdb.SMembers(ctx, queue.ActiveItems).Result()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", queue.ActiveItems, err)
	}
	lv := live{}
	for _, it := range items {
		k := queue.KeysFor(it)
		toks := map[string]bool{}
		for _, set := range []struct {
			key      string
			admitted bool
		}{{k.Waiting, false}, {k.Admitted, true}} {
			var cursor uint64
			for {
				kv, next, err := c.rdb.ZScan(ctx, set.key, cursor, "", scanCount).Result()
				if err != nil {
					return nil, fmt.Errorf("scan %s: %w", set.key, err)
				}
				for i := 0; i+1 < len(kv); i += 2 {
					if set.admitted {
						exp, err := strconv.ParseFloat(kv[i+1], 64)
						if err != nil || int64(exp) <= now.UnixMilli() {
							continue // ended: no longer live
						}
					}
					toks[kv[i]] = set.admitted
				}
				if cursor = next; cursor == 0 {
					break
				}
			}
		}
		if len(toks) > 0 {
			lv[it] = toks
		}
	}
	return lv, nil
}

func (c *Checker) scanRegistrations(ctx context.Context, adm *kadm.Client, lv live, inSnap map[[2]string]bool, t *Topic) error {
	need := map[[2]string]bool{}
	for it, toks := range lv {
		for tok := range toks {
			if k := [2]string{it, tok}; !inSnap[k] {
				need[k] = true
			}
		}
	}
	t.Needed = len(need)
	err := scan(ctx, c.base, adm, t.Topic, func(r *kgo.Record) bool {
		ev, err := topics.DecodeRegistration(r.Value)
		if err != nil || ev.Kind != topics.KindRegister {
			return len(need) == 0
		}
		key := [2]string{ev.ItemID, ev.TokenID}
		if need[key] {
			delete(need, key)
			t.found(Entry{Item: ev.ItemID, Token: ev.TokenID, Partition: r.Partition, Offset: r.Offset, At: r.Timestamp})
		}
		return len(need) == 0
	})
	t.missing(need)
	return err
}

func (c *Checker) scanAdmissions(ctx context.Context, adm *kadm.Client, lv live, t *Topic) error {
	need := map[[2]string]bool{}
	for it, toks := range lv {
		for tok, admitted := range toks {
			if admitted {
				need[[2]string{it, tok}] = true
			}
		}
	}
	t.Needed = len(need)
	if len(need) == 0 {
		return nil
	}
	err := scan(ctx, c.base, adm, t.Topic, func(r *kgo.Record) bool {
		ev, err := topics.DecodeAdmission(r.Value)
		if err != nil || ev.Kind != "" {
			return len(need) == 0
		}
		for _, tok := range ev.Admitted {
			key := [2]string{ev.ItemID, tok}
			if need[key] {
				delete(need, key)
				t.found(Entry{Item: ev.ItemID, Token: tok, Partition: r.Partition, Offset: r.Offset, At: r.Timestamp})
			}
		}
		return len(need) == 0
	})
	t.missing(need)
	return err
}

// covered returns the live entries whose place the latest complete snapshot
// of their line holds (a rebuild loads it from there: no register record
// needed), drops from lv those it holds admitted (no admission event needed
// either), and notes the records after each snapshot, which a rebuild
// replays. Without the topic (or on an error reading it) nothing is covered:
// every live entry needs its records.
func (c *Checker) covered(ctx context.Context, adm *kadm.Client, lv live, r *Report) map[[2]string]bool {
	inSnap := map[[2]string]bool{}
	latest := snapshot.NewLatest()
	if err := scan(ctx, c.base, adm, topics.Snapshots, func(rec *kgo.Record) bool { latest.Add(rec); return false }); err != nil {
		return inSnap
	}
	snaps, _ := latest.Complete(func(item string) bool { _, ok := lv[item]; return ok })
	r.tails = map[string]map[int32]int64{}
	for item, s := range snaps {
		for _, e := range s.Places {
			admitted, ok := lv[item][e.Token]
			switch {
			case !ok:
			case admitted && e.State == string(line.Admitted):
				delete(lv[item], e.Token)
			default: // admitted since: its admission event is still needed
				inSnap[[2]string{item, e.Token}] = true
			}
		}
		tail := map[int32]int64{}
		for p := range s.Head.Applied { // the partitions of the item's records
			if through, ok := s.Head.Through[p]; ok {
				tail[p] = through + 1
			}
		}
		r.tails[item] = tail
		at := time.UnixMilli(s.Head.TakenAt)
		if r.OldestSnapshot == "" || at.Before(r.OldestSnapshotAt) {
			r.OldestSnapshot, r.OldestSnapshotAt = item, at
		}
	}
	r.Snapshots = len(snaps)
	return inSnap
}

// tailsKept fails r when Kafka deleted records after a snapshot: a rebuild
// would load the snapshot and miss them.
func (c *Checker) tailsKept(ctx context.Context, adm *kadm.Client, r *Report) error {
	if len(r.tails) == 0 {
		return nil
	}
	starts, err := adm.ListStartOffsets(ctx, topics.Registrations)
	if err != nil {
		return fmt.Errorf("start offsets of %s: %w", topics.Registrations, err)
	}
	for _, item := range slices.Sorted(maps.Keys(r.tails)) {
		for p, from := range r.tails[item] {
			if s, ok := starts.Lookup(topics.Registrations, p); ok && s.Err == nil && s.Offset > from {
				r.Failures = append(r.Failures, fmt.Sprintf(
					"%s/%d: the records %d to %d after the latest snapshot of %s are deleted (by retention): a rebuild now would be incomplete",
					topics.Registrations, p, from, s.Offset-1, item))
			}
		}
	}
	return nil
}

func (t *Topic) found(e Entry) {
	if t.Oldest == nil || e.At.Before(t.Oldest.At) {
		t.Oldest = &e
	}
}

func (t *Topic) missing(need map[[2]string]bool) {
	t.Missing = len(need)
	for k := range need {
		if t.MissingExample == "" || k[0]+"/"+k[1] < t.MissingExample {
			t.MissingExample = k[0] + "/" + k[1]
		}
	}
}

// scan reads topic from the start of every partition up to its end at the
// time of the call, calling fn on each record until fn answers true.
func scan(ctx context.Context, base []kgo.Opt, adm *kadm.Client, topic string, fn func(*kgo.Record) (done bool)) error {
	spans, err := kclient.Spans(ctx, adm, topic)
	if err != nil {
		return err
	}
	return kclient.ReadSpans(ctx, base, topic, spans, kclient.ReadOptions{}, func(r *kgo.Record) error {
		if fn(r) {
			return kclient.SkipAll
		}
		return nil
	})
}
