package stack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/redisview/linesnap"
	"github.com/waitroom/waitroom/pkg/redisview/rebuild"
	"github.com/waitroom/waitroom/pkg/redisview/snapshot"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/services/consumer/ingest"
	"github.com/waitroom/waitroom/services/dev/stack"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap/zaptest"
)

// The property test's knobs: WR_PROPERTY_SEED replays one run's choice of
// operations (the services' timing still varies: ticks, windows, sweeps),
// WR_PROPERTY_STEPS runs more of them locally.
const (
	propertySeedEnv      = "WR_PROPERTY_SEED"
	propertyStepsEnv     = "WR_PROPERTY_STEPS"
	propertyStepsDefault = 300
)

// leaveRacesComplete lets an admitted visitor leave just before the shop
// completes the admission. This test found that live and rebuilt lines then
// differed (seed 1795642195355146942 of commit 50119cb's operations on the
// cluster, item p-idle, a token live COMPLETED, rebuilt LEFT; with it on,
// nearly every run): the leave is only recorded (the consumer applies it a
// moment later) while the complete, recorded after it, is also applied to
// Redis at once by the api, so live the complete landed first and the leave
// then changed nothing, while the rebuild applied the record in its order.
// complete.lua now makes the two commute (a completion marks its own left
// place completed), so it is on.
const leaveRacesComplete = true

// The property test's items, one per shape of the line.
const (
	propFIFO    = "p-fifo"    // fifo, admits 5/s up to 3 at once for 2 s: admissions expire all along
	propIdle    = "p-idle"    // fifo, places idle 2 s are released (abandon records)
	propLottery = "p-lottery" // random mode, a draw every 1 s window
	propSale    = "p-sale"    // a sale opening in an hour: everyone is pooled for its draw
)

var propItems = []string{propFIFO, propIdle, propLottery, propSale}

// propToken is a registration the property test holds.
type propToken struct {
	item, user, token string
	// silent: a page closed after its first read (the idle item's): never
	// polled again, its place is released.
	silent bool
}

// propRun drives one random sequence of operations through the public APIs.
type propRun struct {
	t      *testing.T
	e      *env
	rnd    *rand.Rand
	tokens map[string][]propToken // item -> every registration answered 202
	codes  map[string][]string    // item -> bypass codes issued
	users  int
	ops    map[string]int // what was done, for the log
	// leaving: the registrations asked to leave (complete may still race
	// them: see leaveRacesComplete).
	leaving map[string]bool
}

// Random sequences of registrations, repeat registrations, leaves, polls
// (and their absence: idle places released), draws (random mode and a
// scheduled sale's pool), bypass codes issued and used, admissions,
// completions and admission expiries, applied live by the real services over
// HTTP; then, quiet (admission paused, idle release off, every record
// applied, no admission left that ends during the check), the line of every
// item is snapshotted (pkg/redisview/linesnap), the view is lost (FLUSHALL, every
// master on a cluster), the services rebuild it from the topics, and the
// rebuilt line is byte-for-byte the live one. Every line is snapshotted
// halfway (waitroom.snapshots, as the consumer does), so the rebuild loads
// the snapshots and replays the second half; a full replay of the whole
// record (rebuild.Options.FullReplay) and a rebuild from the snapshots,
// run directly, must each give the live line too, the latter reading fewer
// records. Breaking load_snapshot.lua (a LEFT place written as held) fails
// both rebuilds that load snapshots. The seed is printed; a failure
// names the item and every token that differs, and leaves both snapshots in
// the artefacts directory.
//
// What linesnap leaves out is not compared: the pace window and rate bucket
// (timers of the next admission, not the line), the draw and idle timers,
// last-seen times. The line's bypass uses and released-place count are not
// in linesnap; they are compared beside it. Both snapshots classify
// admissions at the same instant: the live admitted set may still hold an
// ended admission a tick has not dropped yet, which a rebuild never writes;
// linesnap calls both GONE.
//
// Breaking one script's rule once fails it (checked by hand while the
// rebuild had its own Go model of the rules): leave.lua ignoring an
// admitted visitor's leave gave 3 items with a token live ADMITTED or
// COMPLETED, rebuilt LEFT; enqueue.lua's bypass check off by one (uses >
// count) gave p-fifo a code used twice live, once rebuilt, and seq and
// positions one lower for everyone behind.
//
// The comparison's teeth: the same record with one leave replaced by a
// record of another item (every offset kept) is rebuilt into an empty Redis
// by a second stack, and the snapshot of that item must differ exactly at
// the token whose leave was dropped.
func TestLiveLineEqualsItsRebuildFromTheRecord(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(propertySeedEnv); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s", propertySeedEnv)
	}
	steps := propertyStepsDefault
	if s := os.Getenv(propertyStepsEnv); s != "" {
		var err error
		steps, err = strconv.Atoi(s)
		require.NoError(t, err, "%s", propertyStepsEnv)
	}
	t.Logf("property seed %d, %d steps (replay: %s=%d)", seed, steps, propertySeedEnv, seed)

	fifo := policy(propFIFO, 5, 3, 2)
	idle := policy(propIdle, 2, 3, 600)
	idle.IdleTimeoutSeconds = 2
	e := newEnv(t, fifo, idle, policy(propLottery, 3, 4, 600), policy(propSale, 5, 5, 600))
	// The test snapshots every line itself halfway (as the consumer does
	// each WR_SNAPSHOT_INTERVAL), so the rebuild from the snapshots has a
	// tail of half the run to replay.
	e.startWith(func(o *stack.Options) { o.SeenFlush, o.SnapshotInterval = 500*time.Millisecond, -1 })
	adminPost(t, e, propLottery, `{"mode":"random","drawWindowSeconds":1}`)
	adminPost(t, e, propSale, fmt.Sprintf(`{"opensAt":%d}`, time.Now().Add(time.Hour).UnixMilli()))

	r := &propRun{t: t, e: e, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		tokens: map[string][]propToken{}, codes: map[string][]string{}, ops: map[string]int{}, leaving: map[string]bool{}}
	for _, it := range []string{propLottery, propSale} {
		q := e.firstPreQueued(it, "first-"+it) // waits for the api to know the draw
		r.tokens[it] = append(r.tokens[it], propToken{item: it, user: "first-" + it, token: e.tokenOf(q)})
	}
	began := time.Now()
	for i := range steps {
		if i == steps/2 {
			r.snapshotAll()
		}
		r.step()
	}
	t.Logf("%d operations in %s: %v", steps, time.Since(began).Round(time.Millisecond), r.ops)
	if steps >= propertyStepsDefault {
		r.abandonOnce()
	}

	at := quiesce(t, e)
	live := snapshots(t, e, at)
	if steps >= propertyStepsDefault { // fewer (a quick local run) may miss some
		r.exercised(live)
	}

	t.Run("a full replay and a rebuild from the snapshots and their tail equal the live line", func(t *testing.T) {
		ctx := context.Background()
		rb := rebuild.New(e.rdb, []kgo.Opt{kgo.SeedBrokers(e.brokers...)}, zaptest.NewLogger(t))
		full, err := rb.Run(ctx, rebuild.Options{Reason: "property test: full replay", FullReplay: true})
		require.NoError(t, err)
		waitApplied(t, e)
		if differs := compareLines(t, seed, live, snapshots(t, e, at)); len(differs) > 0 {
			history(t, e, differs)
		}
		snap, err := rb.Run(ctx, rebuild.Options{Reason: "property test: from snapshots"})
		require.NoError(t, err)
		waitApplied(t, e)
		if differs := compareLines(t, seed, live, snapshots(t, e, at)); len(differs) > 0 {
			history(t, e, differs)
		}
		t.Logf("full replay: %d records in %s; from %d snapshots: %d records in %s", full.Records, full.Took, snap.Snapshots, snap.Records, snap.Took)
		require.Zero(t, full.Snapshots, "the full replay loaded snapshots")
		require.Equal(t, len(propItems), snap.Snapshots, "lines loaded from a snapshot (torn: %v)", snap.Torn)
		require.Less(t, snap.Records, full.Records, "the rebuild from snapshots read as much as a full replay")
	})

	t.Run("the rebuild equals the live line", func(t *testing.T) {
		ctx := context.Background()
		m, ok, err := view.Read(ctx, e.rdb)
		require.NoError(t, err)
		require.True(t, ok)
		e.flushAll()
		require.Eventually(t, func() bool {
			n, ok, err := view.Read(ctx, e.rdb)
			return err == nil && ok && n.State == view.Ready && n.Gen != m.Gen
		}, 60*time.Second, 50*time.Millisecond, "the view is rebuilt after FLUSHALL")
		waitApplied(t, e)
		if differs := compareLines(t, seed, live, snapshots(t, e, at)); len(differs) > 0 {
			history(t, e, differs)
		}
	})

	t.Run("a rebuild missing one record is caught", func(t *testing.T) {
		dropped, item, tok := copyRecordDroppingOneLeave(t, e, live)
		rdb := testenv.StartRedis(t)
		other := &env{t: t, brokers: dropped, rcfg: config.Redis{Addr: rdb.Addr}, rdb: rdb.Client(), http: e.http, signer: e.signer}
		other.startWith(func(o *stack.Options) {})
		require.Eventually(t, func() bool {
			n, ok, err := view.Read(context.Background(), other.rdb)
			return err == nil && ok && n.State == view.Ready
		}, 60*time.Second, 50*time.Millisecond, "the second stack builds its view")
		got, err := linesnap.Take(context.Background(), other.rdb, item, at)
		require.NoError(t, err)
		d := linesnap.Diff(live[item].snap, got)
		t.Logf("the rebuild without the leave of %s (%s) differs in %d lines: %s", tok, item, len(d), strings.Join(d, "; "))
		require.NotEmpty(t, d, "the comparison missed a rebuild that dropped a leave")
		require.True(t, slices.ContainsFunc(d, func(l string) bool { return strings.Contains(l, "token "+tok+":") }),
			"the diff names the token whose leave was dropped (%s): %v", tok, d)
	})
}

// snapshotAll writes a snapshot of every item's line as the consumer's
// writer does, while the services run; a line mid-change (a draw half
// applied, admissions not yet published) is tried again.
func (r *propRun) snapshotAll() {
	t := r.t
	kc, err := kgo.NewClient(kgo.SeedBrokers(r.e.brokers...), kgo.RequiredAcks(kgo.AllISRAcks()))
	require.NoError(t, err)
	defer kc.Close()
	w := snapshot.NewWriter(r.e.rdb, kc, zaptest.NewLogger(t))
	for _, it := range propItems {
		var h topics.SnapshotHead
		require.Eventually(t, func() bool {
			h, err = w.Write(context.Background(), it)
			if errors.Is(err, queue.ErrBusy) || errors.Is(err, snapshot.ErrNotTrusted) {
				return false
			}
			require.NoError(t, err)
			return true
		}, 10*time.Second, 20*time.Millisecond, "snapshot %s", it)
		t.Logf("snapshot of %s: %d places in %d chunks, through %v", it, h.Entries, h.Chunks, h.Through)
	}
	r.ops["snapshot of every line"]++
}

// step does one random operation.
func (r *propRun) step() {
	switch n := r.rnd.IntN(100); {
	case n < 38:
		r.register(r.anyItem(), "")
	case n < 44:
		r.registerAgain()
	case n < 56:
		r.leave()
	case n < 66:
		r.poll()
	case n < 76:
		r.complete()
	case n < 82:
		r.useBypass()
	case n < 85:
		r.issueBypass()
	case n < 89:
		r.leaveHead()
	default:
		r.ops["pause"]++
		time.Sleep(time.Duration(50+r.rnd.IntN(250)) * time.Millisecond)
	}
}

func (r *propRun) anyItem() string { return propItems[r.rnd.IntN(len(propItems))] }

// pick returns one of item's registrations (ok false: none yet).
func (r *propRun) pick(item string) (propToken, bool) {
	ts := r.tokens[item]
	if len(ts) == 0 {
		return propToken{}, false
	}
	return ts[r.rnd.IntN(len(ts))], true
}

// pickAwake is pick among the registrations whose page is still open.
func (r *propRun) pickAwake(item string) (propToken, bool) {
	for range 8 {
		if tok, ok := r.pick(item); !ok || !tok.silent {
			return tok, ok
		}
	}
	return propToken{}, false
}

// call does a request and fails the test on a server error: every service is
// up and the view live, so only the caller's mistakes (4xx) are expected.
func (r *propRun) call(method, path string, body any) answer {
	r.t.Helper()
	var b []byte
	if body != nil {
		var err error
		b, err = json.Marshal(body)
		require.NoError(r.t, err)
	}
	a := r.e.do(method, path, b, "Content-Type", "application/json")
	require.Less(r.t, a.Code, 500, "%s %s: %s", method, path, a.Body)
	return a
}

func (r *propRun) register(item, user string, extra ...string) {
	kind := "register"
	if user == "" {
		r.users++
		user = fmt.Sprintf("u%04d", r.users)
	} else {
		kind = "register again"
	}
	body := map[string]any{"userId": user}
	if len(extra) == 1 {
		body["bypass"], kind = extra[0], "bypass use"
	}
	a := r.call(http.MethodPost, "/api/v1/items/"+item+"/registrations", body)
	if a.Code != http.StatusAccepted {
		r.ops[kind+" refused "+errCode(r.t, a)]++
		return
	}
	var res httpapi.RegisterResponse
	a.decode(r.t, &res)
	tok := propToken{item: item, user: user, token: res.Token}
	if item == propIdle { // the page reads its status once (a sign of life); some close then
		r.call(http.MethodGet, "/api/v1/items/"+item+"/registrations/"+res.Token, nil)
		tok.silent = r.rnd.IntN(3) == 0
	}
	r.tokens[item] = append(r.tokens[item], tok)
	r.ops[kind]++
}

// registerAgain registers a user who registered before: the same place
// while it holds one, else a new one at the back.
func (r *propRun) registerAgain() {
	if tok, ok := r.pick(r.anyItem()); ok {
		r.register(tok.item, tok.user)
	}
}

func (r *propRun) leave() {
	tok, ok := r.pick(r.anyItem())
	if !ok {
		return
	}
	r.leaving[tok.token] = true
	a := r.call(http.MethodDelete, "/api/v1/items/"+tok.item+"/registrations/"+tok.token, nil)
	if a.Code == http.StatusAccepted {
		r.ops["leave"]++
		return
	}
	r.ops["leave refused "+errCode(r.t, a)]++
}

// leaveHead leaves the fifo line's first registration not asked to leave
// yet: most likely the next to be admitted, so the leave races the tick
// that admits it.
func (r *propRun) leaveHead() {
	for _, tok := range r.tokens[propFIFO] {
		if r.leaving[tok.token] {
			continue
		}
		r.leaving[tok.token] = true
		a := r.call(http.MethodDelete, "/api/v1/items/"+tok.item+"/registrations/"+tok.token, nil)
		if a.Code == http.StatusAccepted {
			r.ops["leave at the head"]++
		} else {
			r.ops["leave at the head refused "+errCode(r.t, a)]++
		}
		return
	}
}

// abandonOnce makes sure the run released an idle place (the seeded steps
// usually do; their timing is the machine's): if no abandon record is on
// the topic yet, the idle item stops admitting, a registration nobody polls
// joins it and the test waits for its release.
func (r *propRun) abandonOnce() {
	abandoned := func() bool {
		for _, rec := range records(r.t, r.e, topics.Registrations) {
			var ev struct{ Kind string }
			if json.Unmarshal(rec.Value, &ev) == nil && ev.Kind == topics.KindAbandon {
				return true
			}
		}
		return false
	}
	if abandoned() {
		return
	}
	adminPut(r.t, r.e, propIdle, `{"paused":true}`)
	r.register(propIdle, "never-polled")
	require.Eventually(r.t, abandoned, 20*time.Second, 200*time.Millisecond, "an unpolled place of %s released", propIdle)
	r.ops["abandon, ensured"]++
}

// poll reads one status of the idle item: a sign of life that keeps its
// place; the places nobody polls are released.
func (r *propRun) poll() {
	if tok, ok := r.pickAwake(propIdle); ok {
		r.call(http.MethodGet, "/api/v1/items/"+tok.item+"/registrations/"+tok.token, nil)
		r.ops["poll"]++
	}
}

// complete finds an admitted registration among a few and completes it.
func (r *propRun) complete() {
	item := []string{propFIFO, propIdle, propLottery}[r.rnd.IntN(3)]
	for range 4 {
		tok, ok := r.pickAwake(item)
		if !ok {
			return
		}
		a := r.call(http.MethodGet, "/api/v1/items/"+item+"/registrations/"+tok.token, nil)
		if a.Code != http.StatusOK {
			continue
		}
		var st httpapi.StatusResponse
		a.decode(r.t, &st)
		if st.Status != "ADMITTED" {
			continue
		}
		if r.rnd.IntN(3) == 0 && leaveRacesComplete { // the visitor leaves as the shop completes the order
			r.leaving[tok.token] = true
			r.call(http.MethodDelete, "/api/v1/items/"+item+"/registrations/"+tok.token, nil)
			r.ops["leave, then complete"]++
		}
		a = r.call(http.MethodPost, "/api/v1/admissions/complete", httpapi.AdmissionRequest{Token: st.AdmissionToken, ItemID: item})
		if a.Code == http.StatusOK {
			r.ops["complete"]++
		} else {
			r.ops["complete refused "+errCode(r.t, a)]++
		}
		return
	}
}

func (r *propRun) issueBypass() {
	item := []string{propFIFO, propIdle}[r.rnd.IntN(2)]
	r.codes[item] = append(r.codes[item], r.e.issueBypass(item, 1+r.rnd.IntN(3)))
	r.ops["bypass issued"]++
}

func (r *propRun) useBypass() {
	item := []string{propFIFO, propIdle}[r.rnd.IntN(2)]
	if cs := r.codes[item]; len(cs) > 0 {
		r.register(item, "", cs[r.rnd.IntN(len(cs))])
	}
}

// lineAt is one item's line and the counters beside it.
type lineAt struct {
	snap      *linesnap.Snapshot
	bypass    map[string]int64
	abandoned int64
}

func snapshots(t *testing.T, e *env, at time.Time) map[string]lineAt {
	t.Helper()
	ctx := context.Background()
	l := queue.New(e.rdb)
	out := map[string]lineAt{}
	for _, it := range propItems {
		s, err := linesnap.Take(ctx, e.rdb, it, at)
		require.NoError(t, err)
		b, err := l.BypassUsesAll(ctx, it)
		require.NoError(t, err)
		n, err := l.AbandonedCount(ctx, it)
		require.NoError(t, err)
		out[it] = lineAt{snap: s, bypass: b, abandoned: n}
	}
	return out
}

// exercised proves the run did what the property is about: a run that never
// released, drew, expired or completed anything would compare little.
func (r *propRun) exercised(live map[string]lineAt) {
	t := r.t
	t.Helper()
	kinds := map[string]int{}
	for _, rec := range records(t, r.e, topics.Registrations) {
		var ev struct{ Kind string }
		require.NoError(t, json.Unmarshal(rec.Value, &ev))
		kinds[ev.Kind]++
	}
	admitted := 0
	for _, rec := range records(t, r.e, topics.Admissions) {
		if ev, err := topics.DecodeAdmission(rec.Value); err == nil {
			admitted += len(ev.Admitted)
		}
	}
	states := map[string]map[line.State]int{}
	for it, l := range live {
		states[it] = map[line.State]int{}
		for _, en := range l.snap.Entries {
			states[it][en.State]++
		}
	}
	t.Logf("records: %v, %d admitted; lines: %v; bypass uses %v", kinds, admitted, states,
		[]map[string]int64{live[propFIFO].bypass, live[propIdle].bypass})
	for _, k := range []string{topics.KindRegister, topics.KindLeave, topics.KindComplete, topics.KindAbandon, topics.KindDraw} {
		require.Positive(t, kinds[k], "no %s record in the run", k)
	}
	require.Positive(t, admitted, "nobody admitted")
	require.Positive(t, states[propFIFO][line.Gone], "no admission of %s expired", propFIFO)
	require.Positive(t, states[propSale][line.Pooled], "nobody pooled for %s's draw", propSale)
	require.Positive(t, states[propIdle][line.Admitted]+states[propLottery][line.Admitted], "no admission live at the check")
	require.Positive(t, len(live[propFIFO].bypass)+len(live[propIdle].bypass), "no bypass code used")
}

// quiesce stops every source of change and returns the instant both
// snapshots classify admissions at: admission paused, idle release off,
// every pending draw done, every record applied and the topics still for a
// second (ten ticks), and no admission ending within two minutes of it
// (sessions of 2 s are waited out), so the rebuild, later, drops the same
// expired admissions the live line had.
func quiesce(t *testing.T, e *env) time.Time {
	t.Helper()
	ctx := context.Background()
	for _, it := range propItems {
		adminPut(t, e, it, `{"paused":true}`)
	}
	adminPost(t, e, propIdle, `{"idleTimeoutSeconds":0}`)
	require.Eventually(t, func() bool {
		s, err := linesnap.Take(ctx, e.rdb, propLottery, time.Time{})
		require.NoError(t, err)
		return !slices.ContainsFunc(s.Entries, func(en linesnap.Entry) bool {
			return en.State == line.Pooled || en.State == line.Late
		})
	}, 30*time.Second, 100*time.Millisecond, "every window of %s drawn", propLottery)
	waitApplied(t, e)
	for {
		now := time.Now()
		var last int64
		for _, it := range propItems {
			s, err := linesnap.Take(ctx, e.rdb, it, now)
			require.NoError(t, err)
			for _, en := range s.Entries {
				if en.State == line.Admitted && en.ExpiresAtMs < now.Add(2*time.Minute).UnixMilli() {
					last = max(last, en.ExpiresAtMs)
				}
			}
		}
		if last == 0 {
			return now
		}
		time.Sleep(time.Until(time.UnixMilli(last)) + 100*time.Millisecond)
	}
}

// waitApplied waits until the consumer has applied and committed every
// registrations record (its group's lag is 0: it commits after the write)
// and neither topic has grown for a second (ten ticks).
func waitApplied(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	cfg, err := config.Defaults[ingest.Config]()
	require.NoError(t, err)
	adm := kadm.NewClient(e.kcl)
	lag := ""
	quiet := func() string {
		o, err := adm.ListEndOffsets(ctx, topics.Registrations, topics.Admissions)
		require.NoError(t, err)
		var ends []string
		o.Each(func(l kadm.ListedOffset) {
			if l.Offset > 0 {
				ends = append(ends, fmt.Sprintf("%s/%d=%d", l.Topic, l.Partition, l.Offset))
			}
		})
		slices.Sort(ends)
		committed, err := adm.FetchOffsets(ctx, cfg.Group)
		require.NoError(t, err)
		lag = ""
		o.Each(func(l kadm.ListedOffset) {
			if l.Topic != topics.Registrations || l.Offset == 0 {
				return
			}
			if c, ok := committed.Lookup(l.Topic, l.Partition); !ok || c.At != l.Offset {
				lag += fmt.Sprintf(" %s/%d committed %d of %d", l.Topic, l.Partition, c.At, l.Offset)
			}
		})
		return strings.Join(ends, " ")
	}
	deadline := time.Now().Add(60 * time.Second)
	prev := ""
	for {
		cur := quiet()
		if cur == prev && lag == "" {
			return
		}
		require.True(t, time.Now().Before(deadline), "the stack never went quiet: %s;%s", cur, lag)
		prev = cur
		time.Sleep(time.Second)
	}
}

// compareLines asserts every item's rebuilt line is byte-for-byte the live
// one; a difference is listed token by token and both files are saved. It
// returns the tokens that differ (tokenId -> item).
func compareLines(t *testing.T, seed uint64, live, rebuilt map[string]lineAt) map[string]string {
	t.Helper()
	differs := map[string]string{}
	for _, it := range propItems {
		a, b := live[it], rebuilt[it]
		var wa, wb bytes.Buffer
		require.NoError(t, a.snap.Write(&wa))
		require.NoError(t, b.snap.Write(&wb))
		if !bytes.Equal(wa.Bytes(), wb.Bytes()) {
			d := linesnap.Diff(a.snap, b.snap)
			t.Errorf("seed %d, item %s: the rebuilt line differs from the live one (live -> rebuilt, %d lines):\n  %s\nsnapshots: %s %s",
				seed, it, len(d), strings.Join(d[:min(len(d), 40)], "\n  "),
				saveArtefact(t, fmt.Sprintf("property-%d-%s-live.jsonl", seed, it), wa.Bytes()),
				saveArtefact(t, fmt.Sprintf("property-%d-%s-rebuilt.jsonl", seed, it), wb.Bytes()))
		}
		if !maps.Equal(a.bypass, b.bypass) {
			t.Errorf("seed %d, item %s: bypass uses live %v, rebuilt %v", seed, it, a.bypass, b.bypass)
		}
		if a.abandoned != b.abandoned {
			t.Errorf("seed %d, item %s: released places live %d, rebuilt %d", seed, it, a.abandoned, b.abandoned)
		}
		for _, l := range linesnap.Diff(a.snap, b.snap) {
			if tok, _, found := strings.Cut(strings.TrimPrefix(l, "token "), ":"); found && strings.HasPrefix(l, "token ") {
				differs[tok] = it
			}
		}
	}
	return differs
}

// history logs every record about each token whose line differs: what a
// reader needs to tell which side applied the record wrongly.
func history(t *testing.T, e *env, about map[string]string) {
	t.Helper()
	for _, topic := range []string{topics.Registrations, topics.Admissions} {
		for _, rec := range records(t, e, topic) {
			for tok, it := range about {
				if string(rec.Key) == it && bytes.Contains(rec.Value, []byte(`"`+tok+`"`)) {
					t.Logf("token %s: %s/%d@%d (ts %s): %s", tok, topic, rec.Partition, rec.Offset,
						rec.Timestamp.UTC().Format("15:04:05.000"), rec.Value)
				}
			}
		}
	}
}

// copyRecordDroppingOneLeave copies the three topics the view is built from
// to a new kfake cluster, record by record at the same partitions and
// offsets, but for the leave of one token a live line shows LEFT, whose
// place it fills with the same record under another item. It returns the new
// cluster, the item and the token.
func copyRecordDroppingOneLeave(t *testing.T, e *env, live map[string]lineAt) (brokers []string, item, tokenID string) {
	t.Helper()
	ctx := context.Background()
	left := func(item, tok string) bool {
		l, ok := live[item]
		return ok && slices.ContainsFunc(l.snap.Entries, func(en linesnap.Entry) bool {
			return en.Token == tok && en.State == line.LeftLine
		})
	}
	// The leave of a token the line shows LEFT, left once, of a user who
	// registered once (a repeat registration's token leaves the same place):
	// that leave alone made it LEFT. The last such of the fifo line if there
	// is one (most likely it left while waiting, and the places behind it
	// moved up), else of the other lines.
	regs := records(t, e, topics.Registrations)
	leaves, registers := map[string]int{}, map[string]int{} // tokenId -> leaves; item/userId -> registrations
	userOf := map[string]string{}
	events := make([]struct{ Kind, TokenID, UserID string }, len(regs))
	for i, rec := range regs {
		ev := &events[i]
		require.NoError(t, json.Unmarshal(rec.Value, ev))
		switch ev.Kind {
		case topics.KindLeave:
			leaves[ev.TokenID]++
		case topics.KindRegister:
			registers[string(rec.Key)+"/"+ev.UserID]++
			userOf[ev.TokenID] = ev.UserID
		}
	}
	drop := map[string]int{} // item -> index of its last candidate
	for i, ev := range events {
		it := string(regs[i].Key)
		if ev.Kind == topics.KindLeave && leaves[ev.TokenID] == 1 && registers[it+"/"+userOf[ev.TokenID]] == 1 && left(it, ev.TokenID) {
			drop[it] = i
		}
	}
	at := -1
	for _, it := range []string{propFIFO, propLottery, propIdle, propSale} {
		if i, ok := drop[it]; ok {
			at, item, tokenID = i, it, events[i].TokenID
			break
		}
	}
	require.NotEqual(t, -1, at, "no leave that alone made a token LEFT")
	brokers = testenv.Kafka(t, 12)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	require.NoError(t, err)
	defer cl.Close()
	for _, topic := range []string{topics.Items, topics.Admissions, topics.Registrations} {
		recs := regs
		if topic != topics.Registrations {
			recs = records(t, e, topic)
		}
		out := make([]*kgo.Record, len(recs))
		want := make(map[*kgo.Record]int64, len(recs)) // the original's offset
		for i, rec := range recs {
			c := &kgo.Record{Topic: topic, Partition: rec.Partition, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}
			if topic == topics.Registrations && i == at {
				var ev map[string]any
				require.NoError(t, json.Unmarshal(rec.Value, &ev))
				ev["itemId"] = "p-filler"
				c.Key = []byte("p-filler")
				c.Value, err = json.Marshal(ev)
				require.NoError(t, err)
			}
			out[i], want[c] = c, rec.Offset
		}
		for _, res := range cl.ProduceSync(ctx, out...) {
			require.NoError(t, res.Err)
			if topic != topics.Admissions { // written in transactions: their markers took offsets the copy has not
				require.Equal(t, want[res.Record], res.Record.Offset, "the copy keeps %s's offsets", topic)
			}
		}
	}
	return brokers, item, tokenID
}
