// Package waitpage serves the waiting-room page: a small HTML page, embedded
// in the binary, that registers (or resumes a stored token), shows position,
// ETA and progress live over Server-Sent Events (polling the status when no
// stream is available) and, on admission, the admission token and a link on.
package waitpage

import (
	_ "embed"
	"encoding/json"
	"html/template"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/httpserver"
	"github.com/waitroom/waitroom/topics"
)

//go:embed page.html
var pageSrc string

var page = template.Must(template.New("wait").Parse(pageSrc))

// DefaultTarget is where "continue" leads when nothing is configured:
// {itemId} and {admissionToken} are filled in, URL-escaped.
const DefaultTarget = "/checkout?item={itemId}&admission={admissionToken}"

// Handler serves GET /items/:itemId/wait; target is the continue link template.
func Handler(target string) gin.HandlerFunc {
	if target == "" {
		target = DefaultTarget
	}
	return func(c *gin.Context) {
		item := c.Param("itemId")
		if !topics.ValidID(item) {
			httpserver.Abort(c, http.StatusBadRequest, "INVALID_ITEM_ID", "itemId must be "+topics.IDRule)
			return
		}
		cfg, _ := json.Marshal(map[string]string{"itemId": item, "target": target}) // strings always marshal
		c.Header("Content-Type", "text/html; charset=utf-8")
		c.Header("Cache-Control", "no-store")
		c.Status(http.StatusOK)
		// html/template escapes the JSON for its <script> context.
		if err := page.Execute(c.Writer, template.JS(cfg)); err != nil {
			_ = c.Error(err)
		}
	}
}
