package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/redisview/view"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
)

// errCodeOf is the error code of an answer's body ("" when none).
func errCodeOf(t *testing.T, body []byte) string {
	t.Helper()
	var e httpserver.ErrorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	return e.Error.Code
}

// A status read of a token the api remembers (its record in the token's
// slot) is answered from that record only for exactly the raw token that was
// verified: another token's claims under its signature, or its own bytes
// with one more in front, are refused as the full check refuses them, and
// never read the remembered token's place.
func TestATokenTamperedUnderARememberedSignatureIsRefused(t *testing.T) {
	a := newStatusAPI(t, time.Now, nil)
	raws, _ := a.tokens(t, 2, true)
	for i := range 2 { // the first read exact, the second from the slot
		if w := a.get(raws[0], ""); w.Code != http.StatusOK {
			t.Fatalf("read %d of a good token: %d %s", i, w.Code, w.Body)
		}
	}
	own, other := strings.Split(raws[0], "."), strings.Split(raws[1], ".")
	for name, bad := range map[string]string{
		"another token's claims": own[0] + "." + other[1] + "." + own[2],
		"a byte in front":        "e" + raws[0],
		"a claim's byte changed": own[0] + "." + own[1][:10] + string(own[1][10]^1) + own[1][11:] + "." + own[2],
	} {
		w := a.get(bad, "")
		if w.Code != http.StatusUnauthorized || errCodeOf(t, w.Body.Bytes()) != "TOKEN_INVALID" {
			t.Errorf("%s: answered %d %s, want 401 TOKEN_INVALID", name, w.Code, w.Body)
		}
	}
	if w := a.get(raws[0], ""); w.Code != http.StatusOK {
		t.Fatalf("the good token after the tampered ones: %d %s", w.Code, w.Body)
	}
}

// A remembered token's expiry is checked at every read: once past it (and
// the parser's leeway), the read answers 401 TOKEN_EXPIRED though the token
// and its record are still remembered.
func TestARememberedTokenExpiresOnTheStatusRoute(t *testing.T) {
	now := time.Unix(time.Now().Unix(), 0) // a whole second: exp is one
	a := newStatusAPI(t, func() time.Time { return now }, nil)
	raws, _ := a.tokens(t, 1, true) // valid for an hour
	for i := range 2 {
		if w := a.get(raws[0], ""); w.Code != http.StatusOK {
			t.Fatalf("read %d: %d %s", i, w.Code, w.Body)
		}
	}
	now = now.Add(time.Hour + 4*time.Second) // within the 5 s leeway
	if w := a.get(raws[0], ""); w.Code != http.StatusOK {
		t.Fatalf("read within the leeway: %d %s", w.Code, w.Body)
	}
	now = now.Add(2 * time.Second)
	w := a.get(raws[0], "")
	if w.Code != http.StatusUnauthorized || errCodeOf(t, w.Body.Bytes()) != "TOKEN_EXPIRED" {
		t.Fatalf("read past the expiry: %d %s, want 401 TOKEN_EXPIRED", w.Code, w.Body)
	}
}

// A slot's record that its shard dropped is never answered from, nor
// another replica's (servers in one process may share a signer, so its
// slots): the read looks its record up as if it had no slot.
func TestASlotAnswersOnlyFromItsOwnLiveRecord(t *testing.T) {
	p := newPositions(nil, nil, 250*time.Millisecond, time.Minute, 6_400, time.Second)
	p.useBucket(newMemBuckets(redis_rate.Limit{Rate: 5, Burst: 10, Period: time.Second}, 1))
	now := time.Unix(1_900_000_000, 0)
	p.now = func() time.Time { return now }
	waiting := line.Status{State: line.Waiting, Position: 5, Seq: 10, Head: 5}
	slot := &token.Slot{}
	p.remember("it", "a", waiting, view.ItemGen{})
	if _, _, look := p.takeStatus("it", "a", slot); look.e == nil || look.e.left {
		t.Fatalf("the first read does not find the token's place: %+v", look)
	}
	if _, ok := slot.Load().(*tokenRec); !ok {
		t.Fatal("the record was not kept in the token's slot")
	}
	now = now.Add(2 * time.Second) // the bucket full again
	p.remember("it", "a", line.Status{State: line.Admitted}, view.ItemGen{})
	p.left("it", "a") // a new record, its reads exact
	if _, _, look := p.takeStatus("it", "a", slot); look.e == nil || !look.e.left {
		t.Fatalf("a read through the slot answered from the dropped record: %+v", look)
	}

	other := newPositions(nil, nil, 250*time.Millisecond, time.Minute, 6_400, time.Second)
	other.useBucket(newMemBuckets(redis_rate.Limit{Rate: 5, Burst: 10, Period: time.Second}, 1))
	other.now = p.now
	for range 9 { // p's bucket of "a" drained (one taken above)
		p.takeStatus("it", "a", slot)
	}
	if ok, _, _ := p.takeStatus("it", "a", slot); ok {
		t.Fatal("the drained bucket let a read through")
	}
	if ok, _, look := other.takeStatus("it", "a", slot); !ok || look.e != nil {
		t.Fatalf("another replica read p's record through the slot: %v, %+v", ok, look)
	}
}

// Records kept in slots stay bounded as the records do, and every record a
// shard drops (sweep or forgotten half) is marked gone, so no slot answers
// from it.
func TestSlotRecordsStayBoundedAndDroppedOnesGone(t *testing.T) {
	p := newPositions(nil, nil, 250*time.Millisecond, time.Minute, 6_400, time.Second)
	p.useBucket(newMemBuckets(redis_rate.Limit{Rate: 5, Burst: 10, Period: time.Second}, 1))
	now := time.Unix(1_900_000_000, 0)
	p.now = func() time.Time { return now }
	slots := make([]token.Slot, 100_000)
	for i := range slots {
		now = now.Add(10 * time.Microsecond)
		p.takeStatus("it", strconv.Itoa(i), &slots[i])
	}
	n := 0
	for i := range p.shards {
		n += len(p.shards[i].m)
	}
	if n > 6_400+64 {
		t.Fatalf("%d records kept, bound 6,400", n)
	}
	live := 0
	for i := range slots {
		r := slots[i].Load().(*tokenRec)
		held := r.sh.m[string(posKey(nil, "it", strconv.Itoa(i)))] == r
		if held == r.gone {
			t.Fatalf("token %d: held by its shard %v, marked gone %v", i, held, r.gone)
		}
		if held {
			live++
		}
	}
	if live != n || live == len(slots) {
		t.Fatalf("%d slots hold a live record, %d records held, of %d tokens", live, n, len(slots))
	}
}
