package waitpage

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

type items map[string]topics.ItemState

func (m items) Get(item string) (topics.ItemState, bool) { s, ok := m[item]; return s, ok }

func serveWith(t *testing.T, cfg Config, its items) *gin.Engine {
	t.Helper()
	gin.SetMode(gin.TestMode)
	p, err := New(cfg, "", its, zap.NewNop())
	require.NoError(t, err)
	r := gin.New()
	r.GET("/items/:itemId/wait", p.Wait)
	r.GET("/items/:itemId/admitted", p.Admitted)
	return r
}

func get(r http.Handler, url string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	return w
}

func TestDefaultPageSpeaksTheReadersLanguage(t *testing.T) {
	r := serveWith(t, Config{}, items{"gig": {ItemID: "gig", Name: "Gig"}})
	w := get(r, "/items/gig/wait", "Accept-Language", "ko-KR,ko;q=0.9,en;q=0.5")
	require.Equal(t, http.StatusOK, w.Code)
	body := w.Body.String()
	assert.Contains(t, body, `<html lang="ko">`)
	assert.Contains(t, body, "대기 중인 항목: ")
	assert.Equal(t, "ko", w.Header().Get("Content-Language"))
	assert.Contains(t, w.Header().Get("Vary"), "Accept-Language")

	w = get(r, "/items/gig/wait?lang=de", "Accept-Language", "ko")
	assert.Contains(t, w.Body.String(), `<html lang="de">`, "?lang= wins over the header")
	ck := w.Result().Cookies()
	require.Len(t, ck, 1)
	assert.Equal(t, LangCookie, ck[0].Name)
	assert.Equal(t, "de", ck[0].Value)
	w = get(r, "/items/gig/wait", "Accept-Language", "ko", "Cookie", LangCookie+"=de")
	assert.Contains(t, w.Body.String(), `<html lang="de">`, "and is kept in the cookie")
	w = get(r, "/items/gig/wait", "Accept-Language", "fr")
	assert.Contains(t, w.Body.String(), `<html lang="en">`, "a language the room does not speak: English")
}

func TestItemTemplateWinsAndFillsItsPlaceholders(t *testing.T) {
	dir := t.TempDir()
	install := filepath.Join(dir, "install.html")
	require.NoError(t, os.WriteFile(install, []byte(`<html lang="{{.Lang}}"><title>{{.ItemName}}</title><body><p>INSTALL {{.ItemName}}</p><img src="{{.Logo}}" alt="">{{.Room}}</body></html>`), 0o644))
	own := `<html lang="{{.Lang}}"><body><h1>OWN {{.ItemName}}</h1><div>{{.Position}} {{.ETA}} {{.Status}}</div>{{.Room}}</body></html>`
	forged := `Tour</h1><script>alert("x")</script>`
	r := serveWith(t, Config{Template: install, LogoURL: "/logo.png", Colors: "accent=#123456"}, items{
		"own":     {ItemID: "own", Name: forged, Template: own},
		"plain":   {ItemID: "plain", Name: "Plain"},
		"refused": {ItemID: "refused", Name: "R", Template: `<body><script>x()</script>{{.Room}}</body>`},
		"bylang": {ItemID: "bylang", Name: "B", Template: own, Templates: map[string]string{
			"ko": `<html lang="ko"><body><h1>KO {{.ItemName}}</h1>{{.Position}}{{.Room}}</body></html>`,
			"de": `<html lang="de"><body><script>x()</script>{{.Room}}</body></html>`}},
	})
	body := get(r, "/items/own/wait", "Accept-Language", "ja").Body.String()
	assert.Contains(t, body, `<h1>OWN Tour&lt;/h1&gt;&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;</h1>`)
	assert.Contains(t, body, `<span id="position" class="wr-position">`)
	assert.Contains(t, body, `<span id="status" class="wr-status" data-status="">参加しています…</span>`)
	assert.Contains(t, body, `--wr-accent: #123456`)
	assert.Equal(t, 3, strings.Count(body, "<script"), "only the room's: its config, waitroom.js and the page script")

	body = get(r, "/items/plain/wait").Body.String()
	assert.Contains(t, body, "INSTALL Plain")
	assert.Contains(t, body, `src="/logo.png"`)
	body = get(r, "/items/refused/wait").Body.String()
	assert.Contains(t, body, "INSTALL R", "a stored template that fails the check: the install's page")

	// item and language, else the item's page, else the install's.
	body = get(r, "/items/bylang/wait", "Accept-Language", "ko-KR,ko").Body.String()
	assert.Contains(t, body, "<h1>KO B</h1>", "the item's page in the reader's language")
	assert.Contains(t, get(r, "/items/bylang/wait?lang=ko").Body.String(), "<h1>KO B</h1>", "chosen by ?lang= too")
	assert.Contains(t, get(r, "/items/bylang/wait", "Accept-Language", "ja").Body.String(), "<h1>OWN B</h1>", "no page in Japanese: the item's own")
	assert.Contains(t, get(r, "/items/bylang/wait", "Accept-Language", "de").Body.String(), "<h1>OWN B</h1>", "a German page that fails the check: the item's own")
}

func TestConfigRefusesABadInstall(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.html")
	require.NoError(t, os.WriteFile(bad, []byte("<body>\n\n<img src=x onerror=y()>{{.Room}}</body>"), 0o644))
	err := Config{Template: bad}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 3: <img onerror=…>: event-handler attributes are not allowed")
	untitled := filepath.Join(dir, "untitled.html")
	require.NoError(t, os.WriteFile(untitled, []byte(`<html lang="{{.Lang}}"><body>{{.Room}}</body></html>`), 0o644))
	assert.ErrorContains(t, Config{Template: untitled}.Validate(), "the page has no title", "held to the upload's accessibility rules")
	assert.ErrorContains(t, Config{Colors: "accent=red"}.Validate(), `"accent=red" is not name=#hex`)
	assert.ErrorContains(t, Config{Colors: "link=#fff"}.Validate(), `"link" is not one of`)
	assert.ErrorContains(t, Config{LogoURL: "javascript:x()"}.Validate(), "an https: URL or a path")
	assert.NoError(t, Config{Colors: "accent=#123, text=#000000"}.Validate())
}

// The page "continue" leads to by default speaks the waiting page's
// language: the browser's, or the one chosen on the waiting page (the
// cookie), or ?lang=.
func TestAdmittedPageSpeaksTheReadersLanguage(t *testing.T) {
	r := serveWith(t, Config{}, items{"gig": {ItemID: "gig", Name: "Gig <b>"}})
	w := get(r, "/items/gig/admitted?admission=x", "Accept-Language", "ko-KR,ko")
	require.Equal(t, http.StatusOK, w.Code)
	body := w.Body.String()
	assert.Contains(t, body, `<html lang="ko">`)
	assert.Contains(t, body, "<title>입장 완료</title>")
	assert.Contains(t, body, `<h1 id="heading">입장했습니다: <span id="item"></span></h1>`)
	assert.Contains(t, body, "판매하기 전에 대기실에 입장권이 유효한지 확인합니다(<code>POST /api/v1/admissions/verify</code>).")
	assert.Contains(t, body, `"validUntil":"입장권은 {time}까지 유효합니다."`, "the script's strings, in Korean")
	assert.Contains(t, body, `"name":"Gig \u003cb\u003e"`, "the name is data for the script, escaped")
	assert.Equal(t, "ko", w.Header().Get("Content-Language"))

	body = get(r, "/items/gig/admitted", "Accept-Language", "ko", "Cookie", LangCookie+"=de").Body.String()
	assert.Contains(t, body, `<html lang="de">`, "the language chosen on the waiting page")
	assert.Contains(t, body, "Sie sind drin: ")
	body = get(r, "/items/gig/admitted?lang=es").Body.String()
	assert.Contains(t, body, "Comprobando tu acceso…")
	body = get(r, "/items/gig/admitted", "Accept-Language", "fr").Body.String()
	assert.Contains(t, body, `<html lang="en">`)
	assert.Contains(t, body, "You&#39;re in: ")
}
