// Package waitpage serves the waiting-room page: a small HTML page, embedded
// in the binary, that registers (or resumes a stored token), shows position,
// ETA and progress live over Server-Sent Events (polling the status when no
// stream is available) and, on admission, the admission token and a link on.
// The page is drawn over waitroom.js (Script), the browser client any site
// may use for a page of its own. It also serves the page that link leads to
// by default: a stand-in for the shop, which verifies the admission token.
package waitpage

import (
	_ "embed"
	"encoding/json"
	"html/template"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/registration"
	"github.com/waitroom/waitroom/topics"
)

var (
	//go:embed page.html
	pageSrc string
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
	admitted = template.Must(template.New("admitted").Parse(admittedSrc))
)

// DefaultTarget is where "continue" leads when nothing is configured:
// {itemId} and {admissionToken} are filled in, URL-escaped. It is the
// admitted page (AdmittedHandler), which exists wherever the api runs.
const DefaultTarget = "/items/{itemId}/admitted?admission={admissionToken}"

// Items is where the pages look an item's name up (the api's item cache).
type Items interface {
	Get(item string) (topics.ItemState, bool)
}

// Handler serves GET /items/:itemId/wait; target is the continue link template.
func Handler(target string, items Items) gin.HandlerFunc {
	if target == "" {
		target = DefaultTarget
	}
	return serve(page, items, map[string]string{"target": target})
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

// AdmittedHandler serves GET /items/:itemId/admitted, where "continue" leads
// by default: it shows the item and whether the admission token of
// ?admission= verifies.
func AdmittedHandler(items Items) gin.HandlerFunc {
	return serve(admitted, items, nil)
}

func serve(t *template.Template, items Items, extra map[string]string) gin.HandlerFunc {
	return func(c *gin.Context) {
		item := c.Param("itemId")
		if err := registration.CheckItemID(item); err != nil {
			registration.Abort(c, err)
			return
		}
		cfg := map[string]string{"itemId": item, "name": item}
		if st, ok := items.Get(item); ok && st.Name != "" {
			cfg["name"] = st.Name
		}
		for k, v := range extra {
			cfg[k] = v
		}
		js, _ := json.Marshal(cfg) // strings always marshal
		c.Header("Content-Type", "text/html; charset=utf-8")
		c.Header("Cache-Control", "no-store")
		c.Status(http.StatusOK)
		// html/template escapes the JSON for its <script> context.
		if err := t.Execute(c.Writer, template.JS(js)); err != nil {
			_ = c.Error(err)
		}
	}
}
