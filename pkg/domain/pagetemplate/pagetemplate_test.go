package pagetemplate

import (
	"bytes"
	"errors"
	"html/template"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
)

// active counts what a browser would run in page: script elements and
// event-handler attributes.
func active(page string) (scripts, handlers int) {
	z := html.NewTokenizer(strings.NewReader(page))
	for {
		switch z.Next() {
		case html.ErrorToken:
			return scripts, handlers
		case html.StartTagToken, html.SelfClosingTagToken:
			name, more := z.TagName()
			if string(name) == "script" {
				scripts++
			}
			for more {
				var k []byte
				k, _, more = z.TagAttr()
				if strings.HasPrefix(string(k), "on") {
					handlers++
				}
			}
		}
	}
}

const good = `<!doctype html>
<html lang="{{.Lang}}"><head><title>{{.ItemName}} – Shop</title>
<style>body { color: var(--wr-text); }</style></head>
<body><img src="{{.Logo}}" alt="{{.ItemName}}"><h1>{{.ItemName}}</h1>
<p>Place {{.Position}} {{.Total}}, about {{.ETA}}. {{.Status}}</p>{{.Progress}}{{.Countdown}}
{{.Notice}}{{.Message}}{{.Admission}}
{{.Room}}</body></html>`

func TestCheckAcceptsPlaceholdersInTextAndSafeAttributes(t *testing.T) {
	tpl, err := Check(good)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, tpl.Execute(&b, Data{
		Room: `<script src="/waitroom.js"></script>`, Position: `<span id="position">7</span>`,
		Lang: "ko", ItemName: `Tour <script>alert(1)</script> "night"`, Logo: "javascript:alert(2)",
	}))
	out := b.String()
	assert.Contains(t, out, `<span id="position">7</span>`, "a slot is the room's element")
	assert.Contains(t, out, `<script src="/waitroom.js"></script>`, "the room's script")
	scripts, handlers := active(out)
	assert.Equal(t, 1, scripts, "and no other script: %s", out)
	assert.Zero(t, handlers)
	assert.Contains(t, out, `<h1>Tour &lt;script&gt;alert(1)&lt;/script&gt; &#34;night&#34;</h1>`, "a forged name is text")
	assert.Contains(t, out, `alt="Tour &lt;script&gt;alert(1)&lt;/script&gt; &#34;night&#34;"`)
	assert.Contains(t, out, `src="#ZgotmplZ"`, "a script URL never reaches the page")
	assert.Contains(t, out, `lang="ko"`)
}

func TestCheckRefusesWhatCouldRunAScript(t *testing.T) {
	body := func(s string) string { return "<html><body>\n" + s + "\n{{.Room}}</body></html>" }
	for name, tc := range map[string]struct{ src, want string }{
		"script element":        {body(`<script>steal()</script>`), "line 2: <script> is not allowed"},
		"svg script":            {body(`<svg><script>x()</script></svg>`), "<script> is not allowed"},
		"upper-case script":     {body(`<SCRIPT src="//evil/x.js"></SCRIPT>`), "<script> is not allowed"},
		"event handler":         {body(`<img src="x" onerror="steal()">`), "event-handler attributes are not allowed"},
		"javascript URL":        {body(`<a href=" javascript:steal()">x</a>`), "script and data URLs are not allowed"},
		"iframe":                {body(`<iframe src="https://x"></iframe>`), "<iframe> is not allowed"},
		"refresh":               {body(`<meta http-equiv="refresh" content="0;url=/">`), "http-equiv=refresh"},
		"slot in attribute":     {body(`<a title="{{.Position}}">x</a>`), "{{.Position}} in the attribute title of <a>: a live slot stands in the page's text"},
		"slot in style":         {body(`<style>{{.Status}}</style>`), "{{.Status}} inside <style>"},
		"value in style":        {body(`<style>.x{color:{{.ItemName}}}</style>`), "{{.ItemName}} inside <style>"},
		"value in style attr":   {body(`<p style="color: {{.ItemName}}">x</p>`), "attribute style of <p>: not a safe place"},
		"slot in title":         {"<html><head><title>{{.Position}}</title></head><body>{{.Room}}</body></html>", "{{.Position}} inside <title>"},
		"slot in comment":       {body(`<!-- {{.Position}} -->`), ""}, // html/template drops comments: the slot is simply absent
		"unknown placeholder":   {body(`{{.Secret}}`), "line 2: {{.Secret}} is not a placeholder"},
		"function call":         {body(`{{printf "%s" .ItemName}}`), "only placeholders such as {{.Position}} are allowed"},
		"condition":             {body(`{{if .Logo}}<img src="{{.Logo}}">{{end}}`), "no conditions, loops or template calls"},
		"no room":               {"<html><body>{{.Position}}</body></html>", "{{.Room}} must stand once"},
		"room twice":            {body(`{{.Room}}`), "{{.Room}} is used 2 times"},
		"slot twice":            {body(`{{.Position}} {{.Position}}`), "{{.Position}} is used 2 times"},
		"syntax error":          {body(`{{.Position`), "unexpected"},
		"too big":               {body(strings.Repeat("x", MaxSize)), "at most 16384"},
		"data URL, not image":   {body(`<a href="data:text/html,<script>x</script>">x</a>`), "script and data URLs are not allowed"},
		"slot in tag attribute": {body(`<div {{.Status}}>x</div>`), "{{.Status}}"},
		"svg animate href":      {body(`<svg><a><animate attributeName="href" values="x;javascript:steal()"/><text>go</text></a></svg>`), "<animate> is not allowed"},
		"script URL in a list":  {body(`<a href="x" data-x="a, java&#x09;script:steal()">x</a>`), "script and data URLs are not allowed"},
		"entity-encoded URL":    {body(`<a href="&#106;avascript:steal()">x</a>`), "script and data URLs are not allowed"},
		// In SVG and MathML, <style>, <xmp>, <noscript> hold markup, not raw
		// text: an <img> there breaks out into the page as an element.
		"svg style breakout":    {body(`<svg><style><img src=x onerror=steal()></style></svg>`), "<img onerror=…>: event-handler attributes"},
		"math style breakout":   {body(`<math><style><img src=x onerror=steal()></style></math>`), "event-handler attributes are not allowed"},
		"svg noscript breakout": {body(`<svg><noscript><img src=x onerror=steal()></noscript></svg>`), "event-handler attributes are not allowed"},
		"svg xmp javascript":    {body(`<svg><xmp><a href="javascript:steal()">x</a></xmp></svg>`), "script and data URLs are not allowed"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Check(tc.src)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			var p *Problem
			require.True(t, errors.As(err, &p), "a *Problem: %T %v", err, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// Whatever Check accepts renders no element of a forged value: fuzzed
// templates rendered with hostile values have exactly the room's scripts.
func FuzzCheckedTemplatesRunOnlyTheRoomsScript(f *testing.F) {
	f.Add(good)
	f.Add(`<body><a href="{{.Logo}}">{{.ItemName}}</a>{{.Room}}</body>`)
	f.Add(`<body><textarea>{{.ItemName}}</textarea>{{.Room}}<math><mi>{{.ItemName}}</mi></math></body>`)
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Check(src)
		if err != nil {
			return
		}
		hostile := `"><script>x()</script><img src=x onerror=y()>`
		var b bytes.Buffer
		require.NoError(t, tpl.Execute(&b, Data{Room: template.HTML(`<script src="/waitroom.js"></script>`),
			Lang: hostile, ItemName: hostile, Logo: "javascript:" + hostile}))
		scripts, handlers := active(b.String())
		assert.Equal(t, 1, scripts, "%s", b.String())
		assert.Zero(t, handlers, "%s", b.String())
	})
}
