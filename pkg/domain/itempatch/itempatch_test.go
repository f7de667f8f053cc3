package itempatch

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/waitroom/waitroom/topics"
)

func TestPolicyApply(t *testing.T) {
	cur := topics.AdmissionPolicy{RatePerSecond: 20, MaxActive: 100, SessionTTLSeconds: 300}
	paused := cur
	paused.Paused = true
	zero := topics.AdmissionPolicy{MaxActive: 100, SessionTTLSeconds: 300}
	for _, c := range []struct {
		name, body string
		from       topics.AdmissionPolicy
		want       topics.AdmissionPolicy
		errField   string
	}{
		{name: "rate only", body: `{"ratePerSecond":2.5}`, from: cur, want: topics.AdmissionPolicy{RatePerSecond: 2.5, MaxActive: 100, SessionTTLSeconds: 300}},
		{name: "pause keeps the rate", body: `{"paused":true}`, from: cur, want: paused},
		{name: "resume alone keeps the rate", body: `{"paused":false}`, from: paused, want: cur},
		{name: "pause and set the resume rate", body: `{"paused":true,"ratePerSecond":5}`, from: cur,
			want: topics.AdmissionPolicy{RatePerSecond: 5, MaxActive: 100, SessionTTLSeconds: 300, Paused: true}},
		{name: "a change while paused stays paused", body: `{"maxActive":7}`, from: paused,
			want: topics.AdmissionPolicy{RatePerSecond: 20, MaxActive: 7, SessionTTLSeconds: 300, Paused: true}},
		{name: "resume at rate 0 needs a rate", body: `{"paused":false}`, from: zero, errField: "ratePerSecond"},
		{name: "resume from rate 0 with a rate", body: `{"paused":false,"ratePerSecond":3}`, from: zero,
			want: topics.AdmissionPolicy{RatePerSecond: 3, MaxActive: 100, SessionTTLSeconds: 300}},
		{name: "negative rate", body: `{"ratePerSecond":-1}`, from: cur, errField: "ratePerSecond"},
		{name: "huge rate", body: `{"ratePerSecond":1e9}`, from: cur, errField: "ratePerSecond"},
		{name: "absurd maxActive", body: `{"maxActive":1000000000}`, from: cur, errField: "maxActive"},
		{name: "ttl 0", body: `{"sessionTTLSeconds":0}`, from: cur, errField: "sessionTTLSeconds"},
		{name: "ttl over a day", body: `{"sessionTTLSeconds":86401}`, from: cur, errField: "sessionTTLSeconds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p Policy
			if err := json.Unmarshal([]byte(c.body), &p); err != nil {
				t.Fatal(err)
			}
			got, err := p.Apply(c.from)
			switch {
			case c.errField != "" && (err == nil || err.Field != c.errField):
				t.Fatalf("got %+v, %v; want an error on %s", got, err, c.errField)
			case c.errField != "" && got != c.from:
				t.Fatalf("a refused change changed the policy: %+v", got)
			case c.errField == "" && err != nil:
				t.Fatalf("unexpected %v", err)
			case c.errField == "" && got != c.want:
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestStateCheckAndApply(t *testing.T) {
	name, stock, off := "Concert", int64(5), false
	p := Patch{State: State{Name: &name, Stock: &stock, Enabled: &off}}
	if p.Empty() || p.Check() != nil {
		t.Fatalf("empty %v check %v", p.Empty(), p.Check())
	}
	got, err := p.Apply(NewItem("c"))
	if err != nil || got.Name != "Concert" || got.Stock != 5 || got.Enabled || got.Policy != NewItem("c").Policy {
		t.Fatalf("got %+v %v", got, err)
	}
	bad := int64(-2)
	if err := (&State{Stock: &bad}).Check(); err == nil || err.Field != "stock" {
		t.Fatalf("stock -2: %v", err)
	}
	long := string(make([]byte, MaxNameBytes+1))
	if err := (&State{Name: &long}).Check(); err == nil || err.Field != "name" {
		t.Fatalf("long name: %v", err)
	}
	if !(&Patch{}).Empty() {
		t.Fatal("a zero patch is not empty")
	}
	mode, msg := "reject", "Back at 10:00"
	mp := Patch{State: State{Mode: &mode, RejectMessage: &msg}}
	if mp.Empty() || mp.Check() != nil {
		t.Fatalf("mode patch: empty %v check %v", mp.Empty(), mp.Check())
	}
	if got, err := mp.Apply(NewItem("c")); err != nil || got.Mode != "reject" || got.RejectMessage != msg {
		t.Fatalf("mode patch applied: %+v %v", got, err)
	}
	for _, m := range []string{"", "lottery", "FIFO"} {
		if err := (&State{Mode: &m}).Check(); err == nil || err.Field != "mode" {
			t.Fatalf("mode %q: %v", m, err)
		}
	}
	longMsg := string(make([]byte, 301))
	if err := (&State{RejectMessage: &longMsg}).Check(); err == nil || err.Field != "rejectMessage" {
		t.Fatalf("long reject message: %v", err)
	}
}

// The JSON names are the admin API's, and absent fields stay absent.
func TestPolicyJSON(t *testing.T) {
	on := true
	b, err := json.Marshal(Policy{Paused: &on})
	if err != nil || string(b) != `{"paused":true}` {
		t.Fatalf("%s %v", b, err)
	}
}

// Pages by language merge into the item's: a page sets its language, ""
// removes it, the languages not named stay; each page is checked for the
// language it is given for.
func TestTemplatesByLanguageMerge(t *testing.T) {
	page := func(lang string) string {
		return `<html lang="` + lang + `"><head><title>{{.ItemName}}</title></head><body>{{.Position}}{{.Room}}</body></html>`
	}
	it := topics.ItemState{ItemID: "tour", Templates: map[string]string{"ko": page("ko"), "ja": page("ja")}}
	var s State
	if err := json.Unmarshal([]byte(`{"templates":{"ja":"","de":`+jsonQuote(page("de"))+`}}`), &s); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("check: %v", err)
	}
	got := s.Apply(it)
	if len(got.Templates) != 2 || got.Templates["ko"] != page("ko") || got.Templates["de"] != page("de") {
		t.Fatalf("templates %v, want ko kept, de added, ja removed", got.Templates)
	}
	if len(it.Templates) != 2 || it.Templates["ja"] == "" {
		t.Fatal("Apply changed the item it was given")
	}
	if got := (&State{Templates: map[string]string{"ko": ""}}).Apply(topics.ItemState{Templates: map[string]string{"ko": page("ko")}}); got.Templates != nil {
		t.Fatalf("the last page removed: %v, want none", got.Templates)
	}

	for _, c := range []struct {
		name string
		ts   map[string]string
		want string
	}{
		{"a language the room does not speak", map[string]string{"fr": page("fr")}, `templates: "fr" is not a language the room speaks (en, ko, ja, de, es)`},
		{"another language's lang", map[string]string{"ja": page("ko")}, `templates: ja: line 1: <html lang="ko"> in the template for "ja"`},
		{"a script", map[string]string{"de": `<html lang="de"><title>x</title><body><script>x()</script>{{.Room}}</body></html>`}, "templates: de: line 1: <script> is not allowed"},
	} {
		err := (&State{Templates: c.ts}).Check()
		if err == nil || err.Field != "templates" || err.Error() != c.want && !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	if (&State{Templates: map[string]string{}}).Empty() != true {
		t.Error("no templates is no change")
	}
}

func jsonQuote(s string) string { b, _ := json.Marshal(s); return string(b) }
