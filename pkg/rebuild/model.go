package rebuild

import (
	"sort"

	"github.com/waitroom/waitroom/pkg/bypass"
	"github.com/waitroom/waitroom/pkg/queue"
	"github.com/waitroom/waitroom/topics"
)

// admission is what the record says of one token's admission: the first
// event that carried it (events are at least once; a republished token keeps
// its first admission).
type admission struct {
	exp int64 // expiry, unix ms
	at  int64 // the event's time, unix ms
}

// token is one place taken in a line (an ADDED registration).
type token struct {
	seq   int64
	user  string
	ended byte // 0 live, 'L' left, 'C' completed, 'A' abandoned
	// express: placed by a bypass code (admitted at the next tick; its
	// admission does not move the head).
	express bool
	// pool is the draw window of a pooled token, late the offset of one
	// queued behind a pending draw (0: placed, seq set).
	pool, late int64
}

// item is one item's line as the replay builds it.
type item struct {
	id         string
	seq        int64
	tokens     map[string]*token
	users      map[string]string // userId -> tokenId, "!L"/"!C" + tokenId once ended
	applied    map[int32]int64   // registrations partition -> highest applied offset
	registered bool              // a register record was applied: the item is active
	epoch      int64             // highest leader epoch in its admission events
	ticks      []tick            // its admission events, in topic order
	bypass     map[string]int64  // bypass code id -> uses (enqueue.lua)
	abandoned  int64             // places released idle (the stats' abandoned)
	fair                         // its pre-queue and draws (draw.go)
}

type tick struct {
	at     int64
	tokens []string
	exps   []int64
}

// Model is the view rebuilt in memory from the three topics. Feed it the items,
// then every admission event, then the registrations in partition order (see
// the README, "Rebuilding the view", for why this order is exact), then Finish.
type Model struct {
	states   map[string]*topics.ItemState // latest state (nil: tombstoned)
	known    map[string]bool              // items that ever had a state: registrations for them were applied
	items    map[string]*item
	adm      map[string]map[string]admission // item -> tokenId -> its first admission
	maxEpoch int64
}

// NewModel returns an empty model.
func NewModel() *Model {
	return &Model{states: map[string]*topics.ItemState{}, known: map[string]bool{},
		items: map[string]*item{}, adm: map[string]map[string]admission{}}
}

func (m *Model) item(id string) *item {
	it := m.items[id]
	if it == nil {
		it = &item{id: id, tokens: map[string]*token{}, users: map[string]string{}, applied: map[int32]int64{}, bypass: map[string]int64{}}
		m.items[id] = it
	}
	return it
}

// Item applies one waitroom.items record (s nil: a tombstone of id). Like
// apply_item.lua, only a newer version replaces the stored state.
func (m *Model) Item(id string, s *topics.ItemState) {
	if s == nil {
		m.states[id] = nil
		return
	}
	m.known[id] = true
	if cur := m.states[id]; cur != nil && cur.Version >= s.Version {
		return
	}
	m.states[id] = s
}

// Admission applies one waitroom.admissions event (decoded), in topic order.
// sessionTTL is used for events that carry no expiries (older producers).
func (m *Model) Admission(ev *topics.AdmissionEvent) {
	m.maxEpoch = max(m.maxEpoch, ev.Epoch)
	if ev.Kind == topics.KindEpochClaim {
		return
	}
	it := m.item(ev.ItemID)
	it.epoch = max(it.epoch, ev.Epoch)
	adm := m.adm[ev.ItemID]
	if adm == nil {
		adm = map[string]admission{}
		m.adm[ev.ItemID] = adm
	}
	t := tick{at: ev.At}
	for i, tok := range ev.Admitted {
		if _, seen := adm[tok]; seen {
			continue // republished: its first admission stands
		}
		exp := int64(0)
		if len(ev.ExpiresAt) == len(ev.Admitted) {
			exp = ev.ExpiresAt[i]
		} else {
			exp = ev.At + m.ttlMs(ev.ItemID)
		}
		adm[tok] = admission{exp: exp, at: ev.At}
		t.tokens, t.exps = append(t.tokens, tok), append(t.exps, exp)
	}
	if len(t.tokens) > 0 {
		it.ticks = append(it.ticks, t)
	}
}

func (m *Model) ttlMs(id string) int64 {
	if s := m.states[id]; s != nil && s.Policy.SessionTTLSeconds > 0 {
		return s.Policy.SessionTTLSeconds * 1000
	}
	return 300_000 // promote.lua's default
}

// Mark records an offset consumed without a change (a record the consumer
// sent to the DLQ).
func (m *Model) Mark(id string, partition int32, offset int64) {
	it := m.item(id)
	it.applied[partition] = max(it.applied[partition], offset)
}

// Registration applies one waitroom.registrations record, in partition order;
// at is the record's timestamp (unix ms): the moment enqueue.lua judges an
// admission's expiry at when it decides a duplicate (the consumer passes it).
func (m *Model) Registration(ev *topics.RegistrationEvent, partition int32, offset, at int64) {
	if ev.Kind == topics.KindRegister && !m.known[ev.ItemID] {
		m.Mark(ev.ItemID, partition, offset) // the consumer dead-letters a register for an unknown item
		return
	}
	it := m.item(ev.ItemID)
	key := ev.PlaceKey()
	switch ev.Kind {
	case topics.KindDraw:
		m.draw(it, ev, partition, offset)
	case topics.KindRegister:
		it.applied[partition] = max(it.applied[partition], offset)
		it.registered = true
		if cur, ok := it.users[key]; ok && cur[0] != '!' && m.live(it, cur, at) {
			return // DUPLICATE: the user holds a place
		}
		if t := it.tokens[ev.TokenID]; t != nil && t.ended == 0 {
			if _, admitted := m.adm[it.id][ev.TokenID]; !admitted {
				return // DUPLICATE: the same token is waiting
			}
		}
		if ev.Bypass != nil { // a bypass place skips any pending draw (enqueue.lua)
			if it.bypass[ev.Bypass.Code] >= bypass.Allowance(ev) {
				return // EXHAUSTED: never placed
			}
			it.bypass[ev.Bypass.Code]++
		} else if it.waitsForDraw(ev.TokenID, key, ev.Window, offset) {
			return // POOLED or LATE
		}
		it.seq++
		it.tokens[ev.TokenID] = &token{seq: it.seq, user: key, express: ev.Bypass != nil}
		it.users[key] = ev.TokenID
	case topics.KindLeave:
		it.applied[partition] = max(it.applied[partition], offset)
		cur, ok := it.users[key]
		if !ok || cur != ev.TokenID {
			return // NOT_IN_LINE: only the token's own place is left
		}
		if t := it.tokens[cur]; t != nil {
			t.ended = 'L'
			it.unpool(t)
		}
		it.users[key] = "!L" + cur
	case topics.KindAbandon:
		// Like abandon.lua: only the user's live place, only while it
		// waits. A token admitted at any time was admitted before the
		// abandon was applied (after it, it was in no line to admit it
		// from), so its admission stands and the abandon changed nothing.
		it.applied[partition] = max(it.applied[partition], offset)
		if it.users[key] != ev.TokenID {
			return // NOT_IN_LINE
		}
		t := it.tokens[ev.TokenID]
		if t == nil || t.ended != 0 {
			return
		}
		if _, admitted := m.adm[it.id][ev.TokenID]; admitted {
			return
		}
		t.ended = 'A'
		it.unpool(t)
		it.users[key] = "!A" + ev.TokenID
		it.abandoned++
	case topics.KindComplete:
		// complete.lua keeps no applied offset. The API completed a live
		// admission; the event orders it after that admission.
		t := it.tokens[ev.TokenID]
		if t == nil || t.ended != 0 {
			return
		}
		t.ended = 'C'
		if it.users[key] == ev.TokenID {
			it.users[key] = "!C" + ev.TokenID
		}
	}
}

// live reports whether tokenID's place still counted at time at: waiting, or
// admitted with an expiry after at.
func (m *Model) live(it *item, tokenID string, at int64) bool {
	t := it.tokens[tokenID]
	if t == nil || t.ended != 0 {
		return false
	}
	a, admitted := m.adm[it.id][tokenID]
	return !admitted || a.exp > at
}

// Line is one item's rebuilt keys.
type Line struct {
	ID       string
	Seq      int64
	Waiting  []Member // scored by seq, in order
	Admitted []Member // scored by expiry (ms), live at Finish time
	Users    map[string]string
	Head     int64
	Applied  map[int32]int64
	Epoch    int64
	State    *topics.ItemState
	Active   bool
	Paced    []string // "ms:n", oldest first: admissions of the last minute
	Sum60    int64
	Express  []Member         // bypass places not admitted yet (also in Waiting), by seq
	Bypass   map[string]int64 // bypass code id -> uses
	// Abandoned is the stats' count of places released idle.
	Abandoned int64
	// Seen is the derived Seen set of an item with an idleTimeout: every
	// waiting place ("tokenId userId") seen at the rebuild's time, a grace
	// of one timeout for everyone (the live scores are not on the record).
	Seen []Member
	// Pool (scored by window) and Late (scored by offset) wait for a draw;
	// DrawnWindow, DrawnRound and DrawnCommit are the last draw (0: none).
	Pool, Late  []Member
	DrawnWindow int64
	DrawnRound  int64
	DrawnCommit string
	LateAfter   int64
}

// Member of a sorted set.
type Member struct {
	Token string
	Score int64
}

// Result is the whole rebuilt view.
type Result struct {
	Lines []*Line
	// Epoch is the highest leader epoch on the admissions topic (ticks and claims).
	Epoch int64
}

// Finish returns every item's keys as they stand at now (unix ms): expired
// admissions are dropped (their holders read GONE, never waiting again),
// completed and left places are gone, the rest wait in seq order.
func (m *Model) Finish(now int64) Result {
	r := Result{Epoch: m.maxEpoch}
	ids := make([]string, 0, len(m.items)+len(m.states))
	for id := range m.items {
		ids = append(ids, id)
	}
	for id, s := range m.states {
		if _, ok := m.items[id]; !ok && s != nil {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		it := m.item(id)
		ln := &Line{ID: id, Seq: it.seq, Users: it.users, Applied: it.applied, Epoch: it.epoch, State: m.states[id], Active: it.registered,
			Bypass: it.bypass, Abandoned: it.abandoned}
		adm := m.adm[id]
		ln.Waiting = make([]Member, 0, max(len(it.tokens)-len(adm), 0))
		for tok, t := range it.tokens {
			if t.ended != 0 {
				continue
			}
			if t.pool > 0 {
				ln.Pool = append(ln.Pool, Member{tok, t.pool})
				continue
			}
			if t.seq == 0 {
				ln.Late = append(ln.Late, Member{tok, t.late})
				continue
			}
			a, admitted := adm[tok]
			if !admitted {
				ln.Waiting = append(ln.Waiting, Member{tok, t.seq})
				if t.express {
					ln.Express = append(ln.Express, Member{tok, t.seq})
				}
				continue
			}
			if !t.express { // the head is the highest FIFO seq admitted
				ln.Head = max(ln.Head, t.seq)
			}
			if a.exp > now {
				ln.Admitted = append(ln.Admitted, Member{tok, a.exp})
			}
		}
		for tok := range adm {
			if t := it.tokens[tok]; t != nil && !t.express {
				ln.Head = max(ln.Head, t.seq)
			}
		}
		sort.Slice(ln.Waiting, func(i, j int) bool { return ln.Waiting[i].Score < ln.Waiting[j].Score })
		sort.Slice(ln.Express, func(i, j int) bool { return ln.Express[i].Score < ln.Express[j].Score })
		if s := ln.State; s != nil && s.IdleTimeoutSeconds > 0 {
			ln.Seen = make([]Member, 0, len(ln.Waiting)+len(ln.Pool)+len(ln.Late))
			for _, set := range [][]Member{ln.Waiting, ln.Pool, ln.Late} { // every place the sweep may release
				for _, w := range set {
					ln.Seen = append(ln.Seen, Member{queue.SeenMember(w.Token, it.tokens[w.Token].user), now})
				}
			}
		}
		sort.Slice(ln.Late, func(i, j int) bool { return ln.Late[i].Score < ln.Late[j].Score })
		sort.Slice(ln.Pool, func(i, j int) bool {
			a, b := ln.Pool[i], ln.Pool[j]
			return a.Score < b.Score || a.Score == b.Score && a.Token < b.Token
		})
		ln.DrawnWindow, ln.DrawnRound, ln.DrawnCommit, ln.LateAfter = it.drawnWindow, it.drawnRound, it.drawnCommit, it.lateAfter
		sort.Slice(ln.Admitted, func(i, j int) bool {
			a, b := ln.Admitted[i], ln.Admitted[j]
			return a.Score < b.Score || a.Score == b.Score && a.Token < b.Token
		})
		for _, tk := range it.ticks {
			if tk.at > now-60_000 {
				ln.Paced = append(ln.Paced, itoa(tk.at)+":"+itoa(int64(len(tk.tokens))))
				ln.Sum60 += int64(len(tk.tokens))
			}
		}
		r.Lines = append(r.Lines, ln)
	}
	return r
}
