package admin_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/waitroom/waitroom/services/scheduler/admin"
	"github.com/waitroom/waitroom/topics"
)

// A steered item's view carries the controller's last decision beside the
// policy's bounds: what applies and why; an operator steers it, and removes
// the steering, through the admission patch.
func TestItemViewShowsTheSteeringAndThePatchSetsIt(t *testing.T) {
	e := newEnv(t, fakes{})
	e.seed(topics.ItemState{ItemID: "st", Name: "S", Stock: -1, Enabled: true, Version: 1,
		Policy: topics.AdmissionPolicy{RatePerSecond: 10, SessionTTLSeconds: 300}})
	var v admin.ItemView
	body := `{"minRate":0.5,"maxRate":8,"steer":{"targetP95Ms":250,"onSignalLost":"static"}}`
	if code, ed := e.do(http.MethodPut, admin.Prefix+"/items/st/admission", body, &v); code != http.StatusOK {
		t.Fatalf("steer: %d %s %s", code, ed.Code, ed.Message)
	}
	if p := v.Policy; p.MaxRate != 8 || p.MinRate != 0.5 || p.Steer == nil || p.Steer.TargetP95Ms != 250 {
		t.Fatalf("policy after the patch: %+v", p)
	}
	at := time.UnixMilli(time.Now().UnixMilli())
	d := &topics.SteerDecision{Target: 40, Allow: 12, HeadLimit: 52, Rate: 3.5, Reason: "grow: p95 under the band", P95Ms: 120, SiteActive: 37, ShowRatio: 0.8}
	if err := e.line.Steer(e.ctx(), "st", 1, d, at); err != nil {
		t.Fatal(err)
	}
	if code, ed := e.do(http.MethodGet, admin.Prefix+"/items/st", "", &v); code != http.StatusOK {
		t.Fatalf("get: %d %s", code, ed.Code)
	}
	if s := v.Steering; s == nil || !s.Applies || s.Rate != 3.5 || s.HeadLimit != 52 || s.At != at.UnixMilli() || s.Last.Reason != d.Reason {
		t.Fatalf("steering view %+v, want the decision", v.Steering)
	}
	if code, ed := e.do(http.MethodPut, admin.Prefix+"/items/st/admission", `{"steer":{"targetP95Ms":0}}`, nil); code != http.StatusBadRequest {
		t.Fatalf("a zero target: %d %s, want 400", code, ed.Code)
	}
	var off admin.ItemView
	if code, ed := e.do(http.MethodPut, admin.Prefix+"/items/st/admission", `{"unsteer":true}`, &off); code != http.StatusOK || off.Policy.Steer != nil || off.Steering != nil {
		t.Fatalf("unsteer: %d %s %+v", code, ed.Code, off)
	}
}
