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
