package admin_test

import (
	"crypto/ed25519"
	"net/http"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/security/bypass"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/services/scheduler/admin"
	"github.com/waitroom/waitroom/topics"
)

const bypassSeed = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

// The admin API issues codes the api's public key verifies, for known items
// only, within bounds; GET lists each code's uses from the line.
func TestIssueBypass(t *testing.T) {
	priv, err := bypass.ParsePrivate(bypassSeed)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, fakes{bypass: priv})
	e.seed(topics.ItemState{ItemID: "gala", Name: "Gala", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 1, SessionTTLSeconds: 60}})

	var got admin.BypassResponse
	if code, ed := e.do(http.MethodPost, admin.Prefix+"/items/gala/bypass", `{"count":3,"ttlSeconds":3600}`, &got); code != http.StatusOK {
		t.Fatalf("issue: %d %+v", code, ed)
	}
	c, err := bypass.Verify(priv.Public().(ed25519.PublicKey), "gala", got.Code, time.Now())
	if err != nil || c.ID != got.ID || c.Count != 3 || got.ItemID != "gala" {
		t.Fatalf("issued %+v verifies as %+v, %v", got, c, err)
	}
	if until := time.Until(c.ExpiresAt); until < 59*time.Minute || until > time.Hour {
		t.Errorf("expires in %s, want about an hour", until)
	}

	for _, tc := range []struct {
		path, body, code string
		status           int
	}{
		{"/items/nope/bypass", `{"count":1,"ttlSeconds":60}`, "ITEM_NOT_FOUND", http.StatusNotFound},
		{"/items/gala/bypass", `{"count":0,"ttlSeconds":60}`, "INVALID_BYPASS", http.StatusBadRequest},
		{"/items/gala/bypass", `{"count":1,"ttlSeconds":0}`, "INVALID_BYPASS", http.StatusBadRequest},
		// 18446744075 s in nanoseconds wraps past 2^64 to 1.29 s: no code of a moment.
		{"/items/gala/bypass", `{"count":1,"ttlSeconds":18446744075}`, "INVALID_BYPASS", http.StatusBadRequest},
		{"/items/gala/bypass", `{"count":1,"ttl":60}`, "INVALID_JSON", http.StatusBadRequest},
	} {
		if code, ed := e.do(http.MethodPost, admin.Prefix+tc.path, tc.body, nil); code != tc.status || ed.Code != tc.code {
			t.Errorf("POST %s %s: %d %s, want %d %s", tc.path, tc.body, code, ed.Code, tc.status, tc.code)
		}
	}

	// Two uses counted by the line (the consumer applies the records).
	for i, u := range []string{"s1", "s2"} {
		op := queue.Op{Kind: queue.OpRegister, ItemID: "gala", TokenID: "t" + u, UserID: u, Offset: int64(i), Bypass: &queue.BypassOp{Code: got.ID, Count: 3}}
		if _, err := e.line.Apply(e.ctx(), []queue.Op{op}); err != nil {
			t.Fatal(err)
		}
	}
	var uses admin.BypassUses
	if code, ed := e.do(http.MethodGet, admin.Prefix+"/items/gala/bypass", "", &uses); code != http.StatusOK {
		t.Fatalf("uses: %d %+v", code, ed)
	}
	if uses.Uses[got.ID] != 2 || len(uses.Uses) != 1 {
		t.Errorf("uses = %v, want %s: 2", uses.Uses, got.ID)
	}
}

// Without a key the route says so.
func TestIssueBypassDisabled(t *testing.T) {
	e := newEnv(t, fakes{})
	if code, ed := e.do(http.MethodPost, admin.Prefix+"/items/gala/bypass", `{"count":1,"ttlSeconds":60}`, nil); code != http.StatusConflict || ed.Code != "BYPASS_DISABLED" {
		t.Errorf("%d %s, want 409 BYPASS_DISABLED", code, ed.Code)
	}
}
