package pagetemplate

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A template being set is held to what axe-core would call serious or
// critical and the markup shows: each case names the rule and its line.
func TestAcceptRefusesWhatTheMarkupShowsInaccessible(t *testing.T) {
	page := func(html, head, body string) string {
		return "<!doctype html>\n" + html + "<head>" + head + "</head>\n<body>\n" + body + "\n{{.Room}}</body></html>"
	}
	const ok = `<html lang="{{.Lang}}">`
	const title = "<title>{{.ItemName}}</title>"
	for name, tc := range map[string]struct{ src, lang, want string }{
		"good":               {good, "", ""},
		"good, for korean":   {good, "ko", ""},
		"literal lang":       {page(`<html lang="ko-KR">`, title, "x"), "ko", ""},
		"decorative image":   {page(ok, title, `<img src="/a.png" alt="">`), "", ""},
		"zoom allowed":       {page(ok, title+`<meta name="viewport" content="width=device-width, initial-scale=1">`, "x"), "", ""},
		"tabindex 0":         {page(ok, title, `<div tabindex="0">x</div>`), "", ""},
		"no html lang":       {page("<html>", title, "x"), "", "line 2: the page has no <html lang>"},
		"no html at all":     {"<title>x</title><body>{{.Room}}</body>", "", "the page has no <html lang>"},
		"empty lang":         {page(`<html lang="">`, title, "x"), "", `<html lang="">`},
		"lang not a tag":     {page(`<html lang="{{.ItemName}}">`, title, "x"), "", "is not a language tag"},
		"other language":     {page(`<html lang="en">`, title, "x"), "ja", `<html lang="en"> in the template for "ja"`},
		"no title":           {page(ok, "", "x"), "", "the page has no title"},
		"empty title":        {page(ok, "<title> </title>", "x"), "", "the page has no title"},
		"image without alt":  {page(ok, title, "<p>a</p>\n<img src=\"/a.png\" alt=\"a\">\n<IMG src=\"/b.png\">"), "", "line 6: <img> without alt"},
		"area without alt":   {page(ok, title, `<map name="m"><area href="/x" shape="rect" coords="0,0,1,1"></map>`), "", "<area> without alt"},
		"no zoom":            {page(ok, title+`<meta name="viewport" content="width=device-width, user-scalable=no">`, "x"), "", "user-scalable=no"},
		"zoom capped":        {page(ok, title+`<meta name="viewport" content="width=device-width; maximum-scale=1.0">`, "x"), "", "maximum-scale=1.0"},
		"positive tabindex":  {page(ok, title, "<abbr>x</abbr>\n<a href=\"/x\" tabindex=\"3\">x</a>"), "", `line 5: <a tabindex="3">`},
		"safety comes first": {page("<html>", "", "<script>x()</script>"), "", "<script> is not allowed"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Accept(tc.src, tc.lang)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			var p *Problem
			require.True(t, errors.As(err, &p), "a *Problem: %T %v", err, err)
			assert.Contains(t, err.Error(), tc.want)
			_, err = Check(tc.src)
			if name != "safety comes first" {
				assert.NoError(t, err, "a page already stored still renders")
			}
		})
	}
}

func TestLanguages(t *testing.T) {
	assert.Equal(t, "en", Languages()[0], "English is the fallback")
	assert.True(t, IsLanguage("ko"))
	assert.False(t, IsLanguage("fr"))
}
