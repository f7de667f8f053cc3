// Package waitpage serves the waiting-room page: a small HTML page, embedded
// in the binary, that registers (or resumes a stored token), shows position,
// ETA and progress live over Server-Sent Events (polling the status when no
// stream is available) and, on admission, the admission token and a link on.
// The page is drawn over waitroom.js (Script), the browser client any site
// may use for a page of its own. A seller's template (the install's, or an
// item's own) replaces the default page around the same live slots, in the
// reader's language (Catalog). It also serves the page that link leads to
// by default, in the same language: a stand-in for the shop, which verifies
// the admission token.
package waitpage

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/domain/pagetemplate"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

var (
	//go:embed page.html
	pageSrc string
	//go:embed room.html
	roomSrc string
	//go:embed slots.html
	slotsSrc string
	//go:embed page.js
	pageScript string
	//go:embed admitted.html
	admittedSrc string
	//go:embed waitroom.js
	script []byte
	//go:embed sha256.js
	sha256Src []byte
	//go:embed pow-worker.js
	powWorkerSrc []byte
	// powWorker is the solver waitroom.js runs in a Web Worker: the vendored
	// fast-sha256 and the loop over it.
	powWorker = append(append(append([]byte{}, sha256Src...), '\n'), powWorkerSrc...)

	page     = template.Must(template.New("wait").Parse(pageSrc))
	room     = template.Must(template.New("room").Parse(roomSrc))
	slots    = template.Must(template.New("slots").Parse(slotsSrc))
	admitted = template.Must(template.New("admitted").Parse(admittedSrc))
)

// DefaultTarget is where "continue" leads when nothing is configured:
// {itemId} and {admissionToken} are filled in, URL-escaped. It is the
// admitted page (AdmittedHandler), which exists wherever the api runs.
const DefaultTarget = "/items/{itemId}/admitted?admission={admissionToken}"

// Items is where the pages look an item up (the api's item cache): its name
// and its own template.
type Items interface {
	Get(item string) (topics.ItemState, bool)
}

// Pages serves the waiting page of every item: the item's own template in
// the reader's language, else the item's own, else the install's, else the
// room's default page.
type Pages struct {
	target  string
	items   Items
	cat     *Catalog
	install *pagetemplate.Template
	logo    string
	colors  template.CSS
	log     *zap.Logger

	mu     sync.Mutex
	byItem map[string]*pagetemplate.Template // checked item templates by source; nil: refused
}

// maxCompiled bounds the checked item templates kept (by source).
const maxCompiled = 256

// New builds the pages from the install's configuration; target is the
// continue link template ("": DefaultTarget).
func New(cfg Config, target string, items Items, log *zap.Logger) (*Pages, error) {
	if target == "" {
		target = DefaultTarget
	}
	cat, err := LoadCatalog()
	if err != nil {
		return nil, err
	}
	install, err := cfg.install()
	if err != nil {
		return nil, err
	}
	cols, err := cfg.colors()
	if err != nil {
		return nil, err
	}
	var css strings.Builder
	for _, c := range cols { // name and value are checked: [a-z]+ and #hex
		fmt.Fprintf(&css, "--wr-%s: %s; ", c[0], c[1])
	}
	return &Pages{target: target, items: items, cat: cat, install: install, logo: cfg.LogoURL,
		colors: template.CSS(css.String()), log: log, byItem: map[string]*pagetemplate.Template{}}, nil
}

// itemTemplate is the item's own checked page for the reader's language:
// its page in lang, else its page for every language; nil when it has
// neither (then the install's page shows). A stored page that does not pass
// the check is skipped (and its refusal logged once).
func (p *Pages) itemTemplate(item, lang string, st topics.ItemState) *pagetemplate.Template {
	for _, src := range []string{st.Templates[lang], st.Template} {
		if t := p.checked(item, src); t != nil {
			return t
		}
	}
	return nil
}

// checked is src checked (nil: "" or refused), kept by source.
func (p *Pages) checked(item, src string) *pagetemplate.Template {
	if src == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.byItem[src]
	if ok {
		return t
	}
	t, err := pagetemplate.Check(src)
	if err != nil {
		p.log.Warn("item template refused: showing the next page in line", zap.String("item", item), zap.Error(err))
	}
	if len(p.byItem) >= maxCompiled {
		clear(p.byItem)
	}
	p.byItem[src] = t
	return t
}

// opening is what an item's page starts from: the item, the reader's
// language and its messages, the item's name (its id until the item cache
// knows one), and its state when the cache holds it (known).
type opening struct {
	item, lang, name string
	msgs             map[string]string
	st               topics.ItemState
	known            bool
}

// open reads the opening of the page of c's item; ok is false when the item
// id was refused, which is then answered.
func (p *Pages) open(c *gin.Context) (o opening, ok bool) {
	o.item = c.Param("itemId")
	if err := registration.CheckItemID(o.item); err != nil {
		httpserver.Abort(c, err)
		return o, false
	}
	o.lang = p.cat.choose(c)
	o.msgs = p.cat.Messages(o.lang)
	o.name = o.item
	if o.st, o.known = p.items.Get(o.item); o.known && o.st.Name != "" {
		o.name = o.st.Name
	}
	return o, true
}

// writeHead starts a page's 200 answer in lang: HTML, never cached, varying
// with the language the reader asks for or chose.
func writeHead(c *gin.Context, lang string) {
	c.Header("Content-Type", "text/html; charset=utf-8")
	c.Header("Cache-Control", "no-store")
	c.Header("Vary", "Accept-Language, Cookie")
	c.Header("Content-Language", lang)
	c.Status(http.StatusOK)
}

// Wait serves GET /items/:itemId/wait.
func (p *Pages) Wait(c *gin.Context) {
	o, ok := p.open(c)
	if !ok {
		return
	}
	var own *pagetemplate.Template
	if o.known {
		own = p.itemTemplate(o.item, o.lang, o.st)
	}
	cfg, _ := json.Marshal(map[string]any{"itemId": o.item, "name": o.name, "target": p.target, "lang": o.lang, "t": o.msgs}) // strings always marshal
	d := pagetemplate.Data{Lang: o.lang, ItemName: o.name, Logo: p.logo}
	if err := p.fill(&d, o.msgs, template.JS(cfg)); err != nil {
		_ = c.Error(err)
		httpserver.Abort(c, registration.Refuse(http.StatusInternalServerError, "INTERNAL", "the waiting page could not be drawn"))
		return
	}
	writeHead(c, o.lang)
	var err error
	switch {
	case own != nil:
		err = own.Execute(c.Writer, d)
	case p.install != nil:
		err = p.install.Execute(c.Writer, d)
	default:
		err = page.Execute(c.Writer, struct {
			pagetemplate.Data
			T map[string]string
		}{d, o.msgs})
	}
	if err != nil {
		_ = c.Error(err)
	}
}

// fill renders the room's block and the live slots (slots.html) in the
// reader's language into d.
func (p *Pages) fill(d *pagetemplate.Data, msgs map[string]string, cfg template.JS) error {
	render := func(t *template.Template, name string, data any) (template.HTML, error) {
		var b bytes.Buffer
		if err := t.ExecuteTemplate(&b, name, data); err != nil {
			return "", fmt.Errorf("render %s: %w", name, err)
		}
		return template.HTML(b.String()), nil // html/template escaped it
	}
	var err error
	if d.Room, err = render(room, "room", map[string]any{"Cfg": cfg, "Script": template.JS(pageScript), "Colors": p.colors}); err != nil {
		return err
	}
	for _, s := range []struct {
		name string
		into *template.HTML
	}{{"Position", &d.Position}, {"Total", &d.Total}, {"ETA", &d.ETA}, {"Status", &d.Status}, {"Progress", &d.Progress},
		{"Countdown", &d.Countdown}, {"Notice", &d.Notice}, {"Message", &d.Message}, {"Admission", &d.Admission}} {
		if *s.into, err = render(slots, s.name, msgs); err != nil {
			return err
		}
	}
	return nil
}

// ScriptPath is where the api serves waitroom.js, the browser client the
// page is built on (documented in the file), for sites that draw their own page.
const ScriptPath = "/waitroom.js"

// Script serves waitroom.js.
func Script(c *gin.Context) {
	c.Header("Cache-Control", "public, max-age=300")
	c.Header("Access-Control-Allow-Origin", "*") // a script, loadable from any site's page
	c.Data(http.StatusOK, "text/javascript; charset=utf-8", script)
}

// PowWorkerPath is where the api serves the proof-of-work solver waitroom.js
// runs in a Web Worker.
const PowWorkerPath = "/waitroom-pow.js"

// PowWorker serves the solver.
func PowWorker(c *gin.Context) {
	c.Header("Cache-Control", "public, max-age=300")
	c.Header("Access-Control-Allow-Origin", "*") // fetched by waitroom.js on any site's page
	c.Data(http.StatusOK, "text/javascript; charset=utf-8", powWorker)
}

// Admitted serves GET /items/:itemId/admitted, where "continue" leads by
// default: in the reader's language (as the waiting page chooses it), it
// shows the item and whether the admission token of ?admission= verifies.
func (p *Pages) Admitted(c *gin.Context) {
	o, ok := p.open(c)
	if !ok {
		return
	}
	t := map[string]string{"validUntil": o.msgs["validUntil"], "admitted.invalid": o.msgs["admitted.invalid"]}
	js, _ := json.Marshal(map[string]any{"itemId": o.item, "name": o.name, "lang": o.lang, "t": t}) // strings always marshal
	before, after, _ := strings.Cut(o.msgs["admitted.note"], "{verify}")
	writeHead(c, o.lang)
	// html/template escapes the JSON for its <script> context.
	if err := admitted.Execute(c.Writer, map[string]any{"Lang": o.lang, "T": o.msgs, "Cfg": template.JS(js),
		"NoteBefore": before, "NoteAfter": after}); err != nil {
		_ = c.Error(err)
	}
}
