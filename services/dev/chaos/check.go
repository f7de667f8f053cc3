package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/retry"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/topics"
)

// tail reads waitroom.registrations and waitroom.admissions from the start,
// as any auditor could: the record the invariants are checked against. It
// rides out a killed Kafka (the client reconnects by itself).
type tail struct {
	cl  *kgo.Client
	adm *kadm.Client

	mu   sync.Mutex
	next map[string]map[int32]int64 // topic -> partition -> next offset read
	// per item, in offset order
	regs  map[string][]topics.RegistrationEvent
	ticks map[string][]topics.AdmissionEvent
	part  map[string]int32 // item -> its registrations partition
	// tickTimes are the Kafka record times of ticks, same order: the
	// machine's clock, where a tick's At is its scheduler's (skewed).
	tickTimes map[string][]time.Time
}

func newTail(brokers []string) (*tail, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics.Registrations, topics.Admissions),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
		// What the record holds: committed admissions only (a fenced
		// leader's aborted transaction admitted nobody), control records
		// kept so the tail reaches an end that is a transaction marker.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return nil, fmt.Errorf("kafka client of the record: %w", err)
	}
	return &tail{cl: cl, adm: kadm.NewClient(cl), next: map[string]map[int32]int64{},
		regs: map[string][]topics.RegistrationEvent{}, ticks: map[string][]topics.AdmissionEvent{}, part: map[string]int32{},
		tickTimes: map[string][]time.Time{}}, nil
}

func (t *tail) run(ctx context.Context) {
	for ctx.Err() == nil {
		fs := t.cl.PollFetches(ctx)
		t.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			if t.next[r.Topic] == nil {
				t.next[r.Topic] = map[int32]int64{}
			}
			t.next[r.Topic][r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			switch r.Topic {
			case topics.Registrations:
				if ev, err := topics.DecodeRegistration(r.Value); err == nil {
					t.regs[ev.ItemID] = append(t.regs[ev.ItemID], ev)
					t.part[ev.ItemID] = r.Partition
				}
			case topics.Admissions:
				if ev, err := topics.DecodeAdmission(r.Value); err == nil && ev.Kind == "" {
					t.ticks[ev.ItemID] = append(t.ticks[ev.ItemID], ev)
					t.tickTimes[ev.ItemID] = append(t.tickTimes[ev.ItemID], r.Timestamp)
				}
			}
		})
		t.mu.Unlock()
	}
}

// caughtUp waits until the tail has read both topics up to their last
// stable offsets now.
func (t *tail) caughtUp(ctx context.Context) error {
	ends, err := t.adm.ListCommittedOffsets(ctx, topics.Registrations, topics.Admissions)
	if err != nil {
		return fmt.Errorf("list end offsets: %w", err)
	}
	for {
		behind := false
		t.mu.Lock()
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil && o.Offset > 0 && t.next[o.Topic][o.Partition] < o.Offset {
				behind = true
			}
		})
		t.mu.Unlock()
		if !behind {
			return nil
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// verdict is what one check found.
type verdict struct {
	People      int // registrations that got a 202
	Lost        int // a 202 whose registration is not in the line, admitted or completed
	Unserved    int // final check only: a 202 not admitted and completed by the end
	Doubled     int // admitted twice (two different admissions of one token)
	OutOfOrder  int // items whose admission order is not their registration order
	SeqMismatch int // items whose sequence counter is not the number of places on the record
	MaxActive   int64
	OverMax     int
	SSEMissing  int // SSE listeners, final check only: admitted but not told over SSE
	// Regressed: clients told a position larger than one they were told
	// before. Reported; enforced only with Options.StrictPositions (the
	// apis' position estimates are known to break it under slow links).
	Regressed int
	Hung      int // an api cut from Kafka that did not answer a registration 503 within its produce timeout
	Notes     []string
}

func (v verdict) ok() bool {
	return v.Lost == 0 && v.Unserved == 0 && v.Doubled == 0 && v.OutOfOrder == 0 && v.SeqMismatch == 0 && v.OverMax == 0 && v.SSEMissing == 0 && v.Hung == 0
}

func (v *verdict) note(format string, a ...any) {
	if len(v.Notes) < 12 {
		v.Notes = append(v.Notes, fmt.Sprintf(format, a...))
	}
}

// order checks, per item, that the admissions on the record follow the
// registrations on the record and that nobody was admitted twice. A token
// published twice with the same expiry is one admission sent again (the
// scheduler publishes at least once); another expiry is a second admission.
// An event without expiries (the scheduler sends one when it could not read
// them from Redis) says nothing either way: it matches any expiry.
//
// partial is a check mid-run, while the tail may have read an admission
// before the registration it admits (two topics, read side by side): an
// item's check stops at the first admitted token not yet in the line read
// so far. That is sound: one item's registrations are one partition, read in
// order, so a token found in the line has every place before it read too.
func (t *tail) order(v *verdict, partial bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for item, regs := range t.regs {
		// The line's order: each place's first registration, in offset
		// order (a registration under a place key already held holds that
		// place: topics.PlaceKey).
		var line []string
		users := map[string]bool{}
		for _, ev := range regs {
			if ev.Kind == topics.KindRegister && !users[ev.PlaceKey()] {
				users[ev.PlaceKey()] = true
				line = append(line, ev.TokenID)
			}
		}
		var admitted []string
		exp := map[string]int64{}
		for _, ev := range t.ticks[item] {
			for i, tok := range ev.Admitted {
				var e int64
				if i < len(ev.ExpiresAt) {
					e = ev.ExpiresAt[i]
				}
				if old, seen := exp[tok]; seen {
					switch {
					case old == 0:
						exp[tok] = e
					case e != 0 && old != e:
						v.Doubled++
						v.note("%s: %s admitted twice (expiries %d and %d)", item, tok, old, e)
					}
					continue
				}
				exp[tok] = e
				admitted = append(admitted, tok)
			}
		}
		at := make(map[string]bool, len(line))
		for _, tok := range line {
			at[tok] = true
		}
		for i, tok := range admitted {
			if partial && !at[tok] {
				break
			}
			if i >= len(line) || line[i] != tok {
				want := "nobody"
				if i < len(line) {
					want = line[i]
				}
				v.OutOfOrder++
				v.note("%s: admission %d is %s, the line's %d-th is %s", item, i+1, tok, i+1, want)
				break
			}
		}
	}
}

// places is the number of places each item's line gave on the record.
func (t *tail) places() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int64{}
	for item, regs := range t.regs {
		users := map[string]bool{}
		for _, ev := range regs {
			if ev.Kind == topics.KindRegister && !users[ev.PlaceKey()] {
				users[ev.PlaceKey()] = true
				out[item]++
			}
		}
	}
	return out
}

// ledger asks the api for the status of every registration that got a 202:
// each must be in the line, admitted or completed. While a status is not
// known yet (503 during a rebuild) it asks again, up to patience.
func (l *load) ledger(ctx context.Context, v *verdict, final bool, patience time.Duration) {
	ps := l.all()
	sem := make(chan struct{}, 16)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range ps {
		if p.got202.IsZero() {
			continue
		}
		v.People++
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			st := l.knownStatus(ctx, p.statusURL, patience)
			lost, unserved := false, false
			switch st {
			case "WAITING", "ADMITTED", "COMPLETED":
				// At the end everyone has been served: completed, and the
				// line says so.
				unserved = final && (!p.completed || st != "COMPLETED")
			case "PENDING":
				lost = final || time.Since(p.got202) > patience // never applied
			default:
				lost = true
			}
			if lost || unserved {
				mu.Lock()
				if lost {
					v.Lost++
				} else {
					v.Unserved++
				}
				v.note("%s %s (202 at %s, client outcome %q): status %s", p.item, p.user, p.got202.Format("15:04:05.000"), p.outcome, st)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func (l *load) knownStatus(ctx context.Context, url string, patience time.Duration) string {
	deadline := time.Now().Add(patience)
	last := "no answer"
	for {
		code, b, err := l.status(ctx, url)
		switch {
		case err == nil && code == http.StatusOK:
			return b.Status
		case err != nil:
			last = err.Error()
		default:
			last = fmt.Sprintf("HTTP %d", code)
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 200*time.Millisecond) {
			return last
		}
	}
}

// sampler watches each item's admitted set (ZCARD, straight from Redis)
// against its maxActive, every 50 ms, while Redis answers and the view is
// one anybody reads: an item being rebuilt on its own (view.LostKey) and the
// whole view while its marker (view.MarkerKey) is not ready are skipped.
// A rebuild replays the record into the emptied view and drops the
// admissions expired by now only when it settles, so mid-replay an admitted
// set holds everyone admitted over the last session TTL; no service reads
// it then (they answer VIEW_REBUILDING until the marker is ready again).
// The marker is read before and after the ZCARD, and the sample counts only
// when both read ready with the same generation: no rebuild started (a
// rebuild writes a new generation) while the set was counted.
type sampler struct {
	rdb   redis.UniversalClient
	items map[string]int64 // item -> maxActive
	out   io.Writer        // where a sample over the cap is described (nil: nowhere)

	mu     sync.Mutex
	max    map[string]int64
	over   int
	told   int // samples over the cap described on out
	unread int // samples over the cap skipped: the view was not ready
}

func (s *sampler) run(ctx context.Context) {
	retry.Every(ctx, 50*time.Millisecond, false, func(ctx context.Context) error {
		for item, limit := range s.items {
			s.sample(ctx, item, limit)
		}
		return nil
	}, func(error, bool) {})
}

// sample reads item's admitted set once and counts it if the view was
// ready throughout the read.
func (s *sampler) sample(ctx context.Context, item string, limit int64) {
	before, err := readMarker(ctx, s.rdb)
	if err != nil {
		return
	}
	n, err := s.rdb.ZCard(ctx, "wr:{"+item+"}:admitted").Result()
	if err != nil {
		return
	}
	after, err := readMarker(ctx, s.rdb)
	if err != nil {
		return
	}
	read := before.ready() && before == after && !rebuilding(ctx, s.rdb, item)
	if !read {
		if n > limit {
			s.mu.Lock()
			s.unread++
			tell := s.unread == 1 && s.out != nil // the first, to show what was skipped
			s.mu.Unlock()
			if tell {
				s.describe(ctx, item, n, limit, after, "not counted: no service reads the view then")
			}
		}
		return
	}
	s.mu.Lock()
	if n > s.max[item] {
		s.max[item] = n
	}
	tell := n > limit && s.told < 10 && s.out != nil
	if n > limit {
		s.over++
		if tell {
			s.told++
		}
	}
	s.mu.Unlock()
	if tell {
		s.describe(ctx, item, n, limit, before, "counted")
	}
}

// marker is the view marker's state and generation.
type marker struct{ state, gen string }

func (m marker) ready() bool { return m.state == view.Ready }

func readMarker(ctx context.Context, rdb redis.UniversalClient) (marker, error) {
	v, err := rdb.HMGet(ctx, view.MarkerKey, "state", "gen").Result()
	if err != nil {
		return marker{}, err
	}
	var m marker
	m.state, _ = v[0].(string)
	m.gen, _ = v[1].(string)
	return m, nil
}

// describe writes what a sample over the cap saw: the members of the
// admitted set with their expiries, to tell an admission past the cap from
// one that should have gone.
func (s *sampler) describe(ctx context.Context, item string, n, limit int64, m marker, what string) {
	zs, err := s.rdb.ZRangeWithScores(ctx, "wr:{"+item+"}:admitted", 0, -1).Result()
	if err != nil {
		fmt.Fprintf(s.out, "sampler: %s admitted %d > %d (view %q %s; %s): read the members: %v\n", item, n, limit, m.state, m.gen, what, err)
		return
	}
	now := time.Now().UnixMilli()
	var b strings.Builder
	for _, z := range zs {
		fmt.Fprintf(&b, " %v@%+.1fs", z.Member, float64(int64(z.Score)-now)/1000)
	}
	fmt.Fprintf(s.out, "sampler: %s admitted %d > %d (view %q %s; %s), members (expiry from now):%s\n", item, n, limit, m.state, m.gen, what, b.String())
}

func (s *sampler) fill(v *verdict) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.max {
		v.MaxActive = max(v.MaxActive, m)
	}
	v.OverMax = s.over
}

// seq compares each item's sequence counter with the places on the record:
// more is a registration applied twice, fewer one lost.
func seq(ctx context.Context, rdb redis.UniversalClient, places map[string]int64, v *verdict) {
	items := make([]string, 0, len(places))
	for it := range places {
		items = append(items, it)
	}
	sort.Strings(items)
	for _, item := range items {
		n, err := rdb.Get(ctx, "wr:{"+item+"}:seq").Int64()
		if err != nil || n != places[item] {
			v.SeqMismatch++
			v.note("%s: seq %d (%v), the record has %d places", item, n, err, places[item])
		}
	}
}

// sse counts the SSE listeners that were admitted without being told so over
// the stream (they fell back to nothing: every listener must get its event).
func sseMissing(ps []state, v *verdict) {
	for _, p := range ps {
		if p.sse && !p.got202.IsZero() && p.via != "sse" {
			v.SSEMissing++
			v.note("SSE listener %s %s: no admitted event (outcome %q, %d reconnects)", p.item, p.user, p.outcome, p.reconnects)
		}
	}
}

// partitions returns the registrations partition of each item seen so far.
func (t *tail) partitions() map[string]int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int32, len(t.part))
	for k, v := range t.part {
		out[k] = v
	}
	return out
}

// admittedSince is the time (the scheduler's clock) by which every one of
// items had an admission on the record made at or after at: service is
// whole again only once the last item, whichever replica's shard it is in,
// admits again. ok is false while some item has none yet.
func (t *tail) admittedSince(at time.Time, items []string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var last int64
	for _, item := range items {
		var first int64
		for _, ev := range t.ticks[item] {
			if len(ev.Admitted) > 0 && ev.At >= at.UnixMilli() && (first == 0 || ev.At < first) {
				first = ev.At
			}
		}
		if first == 0 {
			return time.Time{}, false
		}
		last = max(last, first)
	}
	return time.UnixMilli(last), true
}
