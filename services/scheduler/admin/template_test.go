package admin_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/waitroom/waitroom/services/scheduler/admin"
)

// A seller's page for one item is checked when it is uploaded: a good one is
// kept with the item (in Redis and the record), a script is refused with a
// 400 naming the line and the construct, and nothing is written.
func TestItemTemplateIsCheckedAtUpload(t *testing.T) {
	e := newEnv(t, fakes{})
	body := func(tpl string) string {
		b, _ := json.Marshal(map[string]string{"template": tpl})
		return string(b)
	}
	// Larger than an ordinary admin body (4 KiB): a real page with its styles.
	good := "<!doctype html><html lang=\"{{.Lang}}\"><head><title>{{.ItemName}}</title><style>" +
		strings.Repeat("p { margin: 0 }\n", 600) + "</style></head><body><h1>{{.ItemName}}</h1>{{.Position}}{{.Room}}</body></html>"
	var v admin.ItemView
	if code, ed := e.do(http.MethodPost, admin.Prefix+"/items/tour", body(good), &v); code != http.StatusOK {
		t.Fatalf("good template: %d %s %s", code, ed.Code, ed.Message)
	}
	if v.Template != good {
		t.Fatalf("answered template of %d bytes, want %d", len(v.Template), len(good))
	}
	s, ok, err := e.line.Item(e.ctx(), "tour")
	if err != nil || !ok || s.Template != good {
		t.Fatalf("Redis: ok %v err %v template of %d bytes", ok, err, len(s.Template))
	}

	for _, tc := range []struct{ name, tpl, want string }{
		{"script", "<body>\n<script>fetch('/steal')</script>{{.Room}}</body>", "template: line 2: <script> is not allowed"},
		{"handler", "<body><img src=x onerror=\"x()\">{{.Room}}</body>", "event-handler attributes are not allowed"},
		{"slot in attribute", "<body><a href=\"{{.Status}}\">x</a>{{.Room}}</body>", "{{.Status}} in the attribute href of <a>"},
		{"no room", "<body>{{.Position}}</body>", "{{.Room}} must stand once"},
		{"unknown", "<body>{{.Price}}{{.Room}}</body>", "{{.Price}} is not a placeholder"},
	} {
		code, ed := e.do(http.MethodPost, admin.Prefix+"/items/tour", body(tc.tpl), nil)
		if code != http.StatusBadRequest || ed.Code != "INVALID_TEMPLATE" || !strings.Contains(ed.Message, tc.want) {
			t.Errorf("%s: %d %s %q, want 400 INVALID_TEMPLATE %q", tc.name, code, ed.Code, ed.Message, tc.want)
		}
	}
	if s, _, _ := e.line.Item(e.ctx(), "tour"); s.Template != good || s.Version != 1 {
		t.Fatalf("a refused template changed the item: version %d", s.Version)
	}
	var cleared admin.ItemView
	if code, ed := e.do(http.MethodPost, admin.Prefix+"/items/tour", `{"template":""}`, &cleared); code != http.StatusOK || cleared.Template != "" {
		t.Fatalf("clearing: %d %s, template of %d bytes", code, ed.Code, len(cleared.Template))
	}
}

// Pages per language are uploaded beside the item's page and merged: each is
// checked for its language, and an obviously inaccessible page (no lang, no
// title, an image without alt) is refused with a 400 naming the rule and the
// line, as a script is.
func TestItemTemplatesByLanguageAreCheckedAtUpload(t *testing.T) {
	e := newEnv(t, fakes{})
	page := func(lang, words string) string {
		return `<!doctype html><html lang="` + lang + `"><head><title>{{.ItemName}}</title></head><body><h1>` + words +
			`</h1>{{.Position}}{{.Room}}</body></html>`
	}
	body := func(ts map[string]string) string {
		b, _ := json.Marshal(map[string]any{"templates": ts})
		return string(b)
	}
	var v admin.ItemView
	if code, ed := e.do(http.MethodPost, admin.Prefix+"/items/tour", body(map[string]string{"ko": page("ko", "대기"), "ja": page("{{.Lang}}", "待機")}), &v); code != http.StatusOK {
		t.Fatalf("good pages: %d %s %s", code, ed.Code, ed.Message)
	}
	if len(v.Templates) != 2 || v.Templates["ko"] != page("ko", "대기") {
		t.Fatalf("answered templates %v", v.Templates)
	}
	if code, ed := e.do(http.MethodPost, admin.Prefix+"/items/tour", body(map[string]string{"ja": "", "de": page("de", "Warten")}), &v); code != http.StatusOK {
		t.Fatalf("second change: %d %s %s", code, ed.Code, ed.Message)
	}
	s, ok, err := e.line.Item(e.ctx(), "tour")
	if err != nil || !ok || len(s.Templates) != 2 || s.Templates["ko"] != page("ko", "대기") || s.Templates["de"] != page("de", "Warten") {
		t.Fatalf("Redis: ok %v err %v templates %v, want ko kept, de added, ja removed", ok, err, s.Templates)
	}

	for _, tc := range []struct {
		name string
		body string
		want string
	}{
		{"unknown language", body(map[string]string{"fr": page("fr", "x")}), `templates: "fr" is not a language the room speaks`},
		{"lang of another language", body(map[string]string{"es": page("de", "x")}), `templates: es: line 1: <html lang="de"> in the template for "es"`},
		{"no lang", `{"template":"<html><head><title>x</title></head><body>{{.Room}}</body></html>"}`, "template: line 1: the page has no <html lang>"},
		{"no title", `{"template":"<html lang=\"{{.Lang}}\"><body>{{.Room}}</body></html>"}`, "template: the page has no title"},
		{"image without alt", body(map[string]string{"ko": "<html lang=\"ko\"><title>t</title><body>\n<img src=\"/logo.png\">{{.Room}}</body></html>"}), "templates: ko: line 2: <img> without alt"},
	} {
		code, ed := e.do(http.MethodPost, admin.Prefix+"/items/tour", tc.body, nil)
		if code != http.StatusBadRequest || ed.Code != "INVALID_TEMPLATE" || !strings.Contains(ed.Message, tc.want) {
			t.Errorf("%s: %d %s %q, want 400 INVALID_TEMPLATE %q", tc.name, code, ed.Code, ed.Message, tc.want)
		}
	}
	if s, _, _ := e.line.Item(e.ctx(), "tour"); s.Version != 2 {
		t.Fatalf("a refused page changed the item: version %d", s.Version)
	}
}
